// The batch loader. A shard of n tokens holds floor((n - 1) / (B*T)) windows of B*T+1 tokens at offsets
// k*B*T; each batch is one window read with pread into the caller's buffer. With shuffle, every epoch visits
// the shards in a seeded permutation and each shard's windows in another, drawn by Fisher-Yates from the
// counter-based RNG so the order is a pure function of (seed, epoch) and a cursor alone restores it.
#include "data/loader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <stdexcept>

#include "core/error.h"
#include "core/rng.h"

namespace mt {
namespace {

constexpr int64_t kHeaderBytes = kShardHeaderInts * sizeof(int32_t);

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
  int64_t bt = 0;  // B*T: tokens per batch, and the stride between windows
  uint16_t* window = nullptr;
  std::vector<ShardInfo> shards;
  std::vector<int64_t> windows;  // per shard, in path order
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

  // Reads count elements of elem_bytes at element offset first of shard s's tokens (or mask) into dst.
  void read(OpenFile& file, int64_t s, bool of_mask, int64_t first, int64_t count, void* dst) {
    const std::string name = path(s, of_mask);
    if (file.shard != s) {
      if (file.fd >= 0) ::close(file.fd);
      file.shard = -1;
      file.fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
      if (file.fd < 0) fail_data("shard " + name + ": cannot open: " + std::strerror(errno));
      file.shard = s;
    }
    const off_t elem_bytes = of_mask ? sizeof(uint8_t) : sizeof(uint16_t);
    char* out = static_cast<char*>(dst);
    size_t left = static_cast<size_t>(count * elem_bytes);
    off_t offset = kHeaderBytes + first * elem_bytes;
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
  void read(int64_t s, int64_t first, int64_t count) { read(tokens, s, false, first, count, window); }

  // Every token must be a valid id; checked once, a window-sized chunk at a time.
  void scan(int64_t s) {
    const int64_t chunk = bt + 1;
    for (int64_t first = 0; first < shards[s].num_tokens; first += chunk) {
      const int64_t count = std::min(chunk, shards[s].num_tokens - first);
      read(s, first, count);
      for (int64_t i = 0; i < count; ++i) {
        if (window[i] >= cfg.vocab_size) {
          fail_data("shard " + shards[s].path + ": token " + std::to_string(window[i]) + " at position " +
                    std::to_string(first + i) + " is not below the vocabulary size " +
                    std::to_string(cfg.vocab_size));
        }
      }
    }
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
    const int64_t chunk = (bt + 1) * static_cast<int64_t>(sizeof(uint16_t));
    const auto* bytes = reinterpret_cast<const uint8_t*>(window);
    for (int64_t first = 0; first < shards[s].num_tokens; first += chunk) {
      const int64_t count = std::min(chunk, shards[s].num_tokens - first);
      read(mask, s, true, first, count, window);
      for (int64_t i = 0; i < count; ++i) {
        if (bytes[i] > max) {
          fail_data("shard " + path(s, true) + ": loss mask value " + std::to_string(bytes[i]) +
                    " at position " + std::to_string(first + i) + " is above " + std::to_string(max));
        }
      }
    }
  }

  // The path index of the shard at position pos of the epoch's order.
  int64_t shard_at(int64_t epoch, int64_t pos) const {
    if (!cfg.shuffle) return pos;
    return permute(pos, static_cast<int64_t>(shards.size()), cfg.seed, shard_order_stream(epoch));
  }

  int64_t window_at(int64_t epoch, int64_t s, int64_t pos) const {
    if (!cfg.shuffle) return pos;
    return permute(pos, windows[s], cfg.seed, window_order_stream(epoch, s));
  }
};

Loader::Loader(std::vector<std::string> shard_paths, const LoaderConfig& cfg, uint16_t* window_buffer) {
  if (cfg.batch < 1 || cfg.seq_len < 1 || cfg.batch > std::numeric_limits<int32_t>::max() / cfg.seq_len) {
    fail_usage("loader: batch " + std::to_string(cfg.batch) + " x seq_len " + std::to_string(cfg.seq_len) +
               " must be positive and fit a shard");
  }
  if (cfg.vocab_size < 1 || cfg.vocab_size > 65536) {
    fail_usage("loader: vocab_size " + std::to_string(cfg.vocab_size) + " must be in [1, 65536]");
  }
  if (shard_paths.empty()) fail_usage("loader: no shards given");
  if (shard_paths.size() > std::numeric_limits<uint32_t>::max()) fail_usage("loader: too many shards");
  auto impl = std::make_unique<Impl>();
  impl->cfg = cfg;
  impl->bt = cfg.batch * cfg.seq_len;
  impl->window = window_buffer;
  for (const std::string& path : shard_paths) {
    impl->shards.push_back(open_shard(path));
    const int64_t n = impl->shards.back().num_tokens;
    if (n < impl->bt + 1) {
      fail_data("shard " + path + ": " + std::to_string(n) +
                " tokens, fewer than one window of B*T+1 = " + std::to_string(impl->bt + 1));
    }
    impl->windows.push_back((n - 1) / impl->bt);
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

int64_t Loader::next_batch(int32_t* inputs, int32_t* targets, uint8_t* loss_mask, int32_t* positions) {
  const int64_t s = impl_->shard_at(cursor_.epoch, cursor_.shard);
  const int64_t w = impl_->window_at(cursor_.epoch, s, cursor_.window);
  const int64_t bt = impl_->bt, T = impl_->cfg.seq_len;
  if ((loss_mask != nullptr) != impl_->cfg.loss_mask || (positions != nullptr) != impl_->cfg.packed)
    throw std::logic_error(
        "loader: mask and position buffers are required exactly when the shards need them");
  impl_->read(s, w * bt, bt + 1);
  const uint16_t* window = impl_->window;
  for (int64_t i = 0; i < bt; ++i) inputs[i] = window[i], targets[i] = window[i + 1];
  skip_batch();
  if (!loss_mask) return bt;
  // The window's mask, read through the window buffer now that its tokens are out: target i is token i + 1.
  const auto* mask = reinterpret_cast<const uint8_t*>(impl_->window);
  impl_->read(impl_->mask, s, true, w * bt, bt + 1, impl_->window);
  int64_t counted = 0;
  for (int64_t i = 0; i < bt; ++i) {
    loss_mask[i] = mask[i + 1] & kLossMaskCounted;
    counted += loss_mask[i] == 1;
  }
  // Positions count from each record's start; every sequence of a packed shard starts one.
  for (int64_t i = 0; positions && i < bt; ++i)
    positions[i] = i % T == 0 || (mask[i] & kLossMaskRecordStart) ? 0 : positions[i - 1] + 1;
  return counted;
}

void Loader::skip_batch() {
  const int64_t s = impl_->shard_at(cursor_.epoch, cursor_.shard);
  if (++cursor_.window == impl_->windows[s]) {
    cursor_.window = 0;
    if (++cursor_.shard == static_cast<int64_t>(impl_->shards.size())) cursor_.shard = 0, ++cursor_.epoch;
  }
}

void Loader::set_cursor(const LoaderCursor& cursor) {
  const int64_t num_shards = static_cast<int64_t>(impl_->shards.size());
  const std::string where = "loader cursor (epoch " + std::to_string(cursor.epoch) + ", shard " +
                            std::to_string(cursor.shard) + ", window " + std::to_string(cursor.window) + ")";
  if (cursor.epoch < 0 || cursor.epoch > std::numeric_limits<uint32_t>::max() || cursor.shard < 0 ||
      cursor.shard >= num_shards) {
    fail_data(where + " is out of range: expected epoch >= 0 and shard in [0, " + std::to_string(num_shards) +
              ")");
  }
  const int64_t windows = impl_->windows[impl_->shard_at(cursor.epoch, cursor.shard)];
  if (cursor.window < 0 || cursor.window >= windows) {
    fail_data(where + " is out of range: that shard has " + std::to_string(windows) + " windows");
  }
  cursor_ = cursor;
}

int64_t Loader::windows_in_shard(int64_t shard_index) const {
  if (shard_index < 0 || shard_index >= static_cast<int64_t>(impl_->windows.size())) {
    fail_usage("loader: shard index " + std::to_string(shard_index) + " is out of range");
  }
  return impl_->windows[shard_index];
}

}  // namespace mt
