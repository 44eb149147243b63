// The sample loader. A shard of n tokens holds floor((n - 1) / T) samples of T+1 tokens at offsets k*T; each
// sample is read with pread into the caller's buffer. Global sample g lies in epoch g / N (N: the samples of
// all shards) at position g % N of that epoch's order. With shuffle, every epoch visits the shards in a
// seeded permutation and each shard's samples in another, drawn by a Feistel network from the counter-based
// RNG, so the order is a pure function of (seed, epoch) and reads stay within one shard at a time.
#include "data/loader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/rng.h"

namespace mt {
namespace {

// The RNG stream of a shuffle: the shard order of an epoch, or the window order of one shard in an epoch.
uint64_t shard_order_stream(int64_t epoch) {
  return static_cast<uint64_t>(epoch) << 32;
}
uint64_t window_order_stream(int64_t epoch, int64_t shard) {
  return (static_cast<uint64_t>(epoch) << 32) | static_cast<uint64_t>(shard + 1);
}

// Position pos of a seeded permutation of [0, n), computed without storing the permutation: a balanced
// Feistel network is a bijection on 2^(2h) values, and walking the cycle until the value falls below n
// restricts it to a bijection on [0, n). 2^(2h) < 4n, so the walk takes under four rounds on average.
int64_t permute(int64_t pos, int64_t n, uint64_t seed, uint64_t stream) {
  int h = 1;
  while ((int64_t{1} << (2 * h)) < n) ++h;
  const uint64_t mask = (uint64_t{1} << h) - 1;
  uint64_t x = static_cast<uint64_t>(pos);
  do {
    uint64_t left = x >> h, right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t next = left ^ (random_bits(seed, stream, (round << 40) | right) & mask);
      left = right;
      right = next;
    }
    x = (left << h) | right;
  } while (x >= static_cast<uint64_t>(n));
  return static_cast<int64_t>(x);
}

}  // namespace

struct Loader::Impl {
  LoaderConfig cfg;
  char* window = nullptr;  // window_tokens ids of window_token_bytes each, read as tokens or mask bytes
  int64_t window_bytes = 0;
  std::vector<ShardInfo> shards;
  std::vector<int64_t> samples;  // per shard, in path order
  int64_t total = 0;             // samples per epoch
  uint32_t crc = 0;              // CRC-32C of every shard's tokens (and mask), in path order
  // The epoch whose order `order` and `starts` hold: its shards in visiting order, and the first position
  // of each in the epoch.
  int64_t cached_epoch = -1;
  std::vector<int64_t> order, starts;
  // The open shard (and its mask), in path order.
  struct OpenFile {
    int fd = -1;
    int64_t shard = -1;
    ~OpenFile() {
      if (fd >= 0) ::close(fd);
    }
  };
  OpenFile tokens, mask;

  std::string path(int64_t s, bool of_mask) const {
    return of_mask ? loss_mask_path(shards[s].path) : shards[s].path;
  }

  // Reads count elements at element offset first of shard s's tokens (or mask) into dst.
  void read(OpenFile& file, int64_t s, bool of_mask, int64_t first, int64_t count, void* dst) {
    const std::string name = path(s, of_mask);
    if (file.shard != s) {
      if (file.fd >= 0) ::close(file.fd);
      file.shard = -1;
      file.fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
      if (file.fd < 0) fail_data("shard " + name + ": cannot open: " + std::strerror(errno));
      file.shard = s;
    }
    const off_t elem_bytes = of_mask ? 1 : shards[s].token_bytes;
    char* out = static_cast<char*>(dst);
    size_t left = static_cast<size_t>(count * elem_bytes);
    off_t offset = kShardHeaderBytes + first * elem_bytes;
    while (left > 0) {
      const ssize_t n = ::pread(file.fd, out, left, offset);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        fail_data("shard " + name + ": cannot read " + std::to_string(left) + " bytes at offset " +
                  std::to_string(offset) +
                  (n < 0 ? std::string(": ") + std::strerror(errno) : ": file shrank"));
      }
      out += n, left -= static_cast<size_t>(n), offset += n;
    }
  }

  // Tokens [first, first + count) of shard s through the window, in pieces it holds: visit(offset, piece)
  // for each, `piece` the ids of tokens first + offset on.
  template <typename Visit>
  void read_tokens(int64_t s, int64_t first, int64_t count, Visit&& visit) {
    const int64_t width = shards[s].token_bytes, most = window_bytes / width;
    for (int64_t offset = 0; offset < count; offset += most) {
      const int64_t n = std::min(most, count - offset);
      read(tokens, s, false, first + offset, n, window);
      if (width == 2)
        visit(offset, std::span<const uint16_t>(reinterpret_cast<const uint16_t*>(window), n));
      else
        visit(offset, std::span<const uint32_t>(reinterpret_cast<const uint32_t*>(window), n));
    }
  }

  // Every token must be a valid id; checked once, a window at a time. The checksum is of the file's bytes.
  void scan(int64_t s) {
    read_tokens(s, 0, shards[s].num_tokens, [&](int64_t offset, auto piece) {
      crc = crc32c(piece.data(), piece.size_bytes(), crc);
      for (size_t i = 0; i < piece.size(); ++i) {
        if (piece[i] >= static_cast<uint32_t>(cfg.vocab_size)) {
          fail_data("shard " + shards[s].path + ": token " + std::to_string(piece[i]) + " at position " +
                    std::to_string(offset + static_cast<int64_t>(i)) + " is not below the vocabulary size " +
                    std::to_string(cfg.vocab_size));
        }
      }
    });
  }

  // The mask must be packed as the run is (for its seq_len, or not at all) and hold no other bits; read
  // through the window buffer's bytes.
  void scan_mask(int64_t s) {
    const int64_t packed_for = check_loss_mask(path(s, true), shards[s].num_tokens);
    if (packed_for != (cfg.packed ? cfg.seq_len : 0)) {
      fail_data("shard " + path(s, true) + ": " +
                (packed_for > 0 ? "records packed for sequences of " + std::to_string(packed_for) + " tokens"
                                : std::string("records not packed")) +
                ", but the run's sequences are " + std::to_string(cfg.seq_len) +
                (cfg.packed ? " tokens, packed" : " tokens, not packed") +
                " (prepare --pack --seq-length N packs for N)");
    }
    const uint8_t max = max_loss_mask_value(packed_for);
    const int64_t chunk = window_bytes;
    const auto* bytes = reinterpret_cast<const uint8_t*>(window);
    for (int64_t first = 0; first < shards[s].num_tokens; first += chunk) {
      const int64_t count = std::min(chunk, shards[s].num_tokens - first);
      read(mask, s, true, first, count, window);
      crc = crc32c(window, static_cast<size_t>(count), crc);
      for (int64_t i = 0; i < count; ++i) {
        if (bytes[i] > max) {
          fail_data("shard " + path(s, true) + ": loss mask value " + std::to_string(bytes[i]) +
                    " at position " + std::to_string(first + i) + " is above " + std::to_string(max));
        }
      }
    }
  }

  void order_epoch(int64_t epoch) {
    if (epoch == cached_epoch) return;
    const auto num_shards = static_cast<int64_t>(shards.size());
    order.resize(shards.size());
    starts.resize(shards.size());
    for (int64_t pos = 0, start = 0; pos < num_shards; ++pos) {
      order[pos] = cfg.shuffle ? permute(pos, num_shards, cfg.seed, shard_order_stream(epoch)) : pos;
      starts[pos] = start;
      start += samples[order[pos]];
    }
    cached_epoch = epoch;
  }

  // Global sample g: its shard (path index) and sample within the shard.
  std::pair<int64_t, int64_t> locate(int64_t g) {
    if (g < 0 || g / total > std::numeric_limits<uint32_t>::max())
      fail_data("loader: sample " + std::to_string(g) + " is out of range: expected [0, 2^32 epochs of " +
                std::to_string(total) + " samples)");
    const int64_t epoch = g / total, pos = g % total;
    order_epoch(epoch);
    const auto at =
        static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), pos) - starts.begin() - 1);
    const int64_t s = order[at], k = pos - starts[at];
    return {s, cfg.shuffle ? permute(k, samples[s], cfg.seed, window_order_stream(epoch, s)) : k};
  }

  // Sample (s, k)'s mask into row `mask_row` (nullptr: only counted); returns its counted targets. The
  // window's bytes hold the T+1 mask values: target i is token i + 1.
  int64_t read_mask(int64_t s, int64_t k, uint8_t* mask_row, int32_t* positions) {
    const int64_t T = cfg.seq_len;
    const auto* bytes = reinterpret_cast<const uint8_t*>(window);
    read(mask, s, true, k * T, T + 1, window);
    int64_t counted = 0;
    for (int64_t i = 0; i < T; ++i) {
      const uint8_t counts = bytes[i + 1] & kLossMaskCounted;
      if (mask_row) mask_row[i] = counts;
      counted += counts == 1;
    }
    // Positions count from each record's start; every sequence of a packed shard starts one.
    for (int64_t i = 0; positions && i < T; ++i)
      positions[i] = i == 0 || (bytes[i] & kLossMaskRecordStart) ? 0 : positions[i - 1] + 1;
    return counted;
  }
};

Loader::Loader(std::vector<std::string> shard_paths, const LoaderConfig& cfg, void* window_buffer) {
  if (cfg.seq_len < 1 || cfg.seq_len >= std::numeric_limits<int32_t>::max())
    fail_usage("loader: seq_len " + std::to_string(cfg.seq_len) + " must be positive and fit a shard");
  if (cfg.vocab_size < 1)
    fail_usage("loader: vocab_size " + std::to_string(cfg.vocab_size) + " must be positive");
  if (shard_paths.empty()) fail_usage("loader: no shards given");
  if (shard_paths.size() > std::numeric_limits<uint32_t>::max()) fail_usage("loader: too many shards");
  auto impl = std::make_unique<Impl>();
  impl->cfg = cfg;
  impl->window = static_cast<char*>(window_buffer);
  impl->window_bytes = window_tokens(cfg) * window_token_bytes(cfg);
  for (const std::string& path : shard_paths) {
    impl->shards.push_back(open_shard(path));
    const int64_t n = impl->shards.back().num_tokens;
    if (n < cfg.seq_len + 1) {
      fail_data("shard " + path + ": " + std::to_string(n) +
                " tokens, fewer than one sample of T+1 = " + std::to_string(cfg.seq_len + 1));
    }
    impl->samples.push_back(samples_in_shard(n, cfg.seq_len));
    impl->total += impl->samples.back();
  }
  if (shards_have_loss_masks(shard_paths) != cfg.loss_mask) {
    fail_data("shard " + shard_paths[0] + (cfg.loss_mask ? ": no loss mask beside it" : ": has a loss mask") +
              ", unlike the training shards");
  }
  for (size_t s = 0; s < impl->shards.size(); ++s) {
    impl->scan(static_cast<int64_t>(s));
    if (cfg.loss_mask) impl->scan_mask(static_cast<int64_t>(s));
  }
  impl_ = impl.release();
}

Loader::~Loader() {
  delete impl_;
}

int64_t Loader::samples_per_epoch() const {
  return impl_->total;
}

uint32_t Loader::data_crc32c() const {
  return impl_->crc;
}

int64_t Loader::read(int64_t first, int64_t count, const SampleRows& rows) {
  const LoaderConfig& cfg = impl_->cfg;
  if ((rows.loss_mask != nullptr) != cfg.loss_mask || (rows.positions != nullptr) != cfg.packed)
    throw std::logic_error("loader: mask and position rows are required exactly when the shards need them");
  const int64_t T = cfg.seq_len;
  int64_t counted = 0;
  for (int64_t row = 0; row < count; ++row) {
    const auto [s, k] = impl_->locate(first + row);
    int32_t *inputs = rows.inputs + row * T, *targets = rows.targets + row * T;
    // Token j of the sample is input j (j < T) and target j - 1 (j > 0).
    impl_->read_tokens(s, k * T, T + 1, [&](int64_t offset, auto piece) {
      for (size_t i = 0; i < piece.size(); ++i) {
        const int64_t j = offset + static_cast<int64_t>(i);
        const auto id = static_cast<int32_t>(piece[i]);
        if (j < T) inputs[j] = id;
        if (j > 0) targets[j - 1] = id;
      }
    });
    counted += rows.loss_mask ? impl_->read_mask(s, k, rows.loss_mask + row * T,
                                                 rows.positions ? rows.positions + row * T : nullptr)
                              : T;
  }
  return counted;
}

int64_t Loader::count_targets(int64_t first, int64_t count) {
  if (!impl_->cfg.loss_mask) return count * impl_->cfg.seq_len;
  int64_t counted = 0;
  for (int64_t g = first; g < first + count; ++g) {
    const auto [s, k] = impl_->locate(g);
    counted += impl_->read_mask(s, k, nullptr, nullptr);
  }
  return counted;
}

}  // namespace mt
