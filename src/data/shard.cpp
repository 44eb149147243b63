// Token shards in llm.c's format and the loss masks beside them: reading a header and checking it against the
// file size, atomic writing, and finding a split's shards.
#include "data/shard.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>

#include "core/error.h"

namespace mt {
namespace {

[[noreturn]] void fail_shard(const std::string& path, const std::string& what) {
  fail_data("shard " + path + ": " + what);
}

void write_all(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_shard(path, std::string("write failed: ") + std::strerror(errno));
    data += n, size -= static_cast<size_t>(n);
  }
}

// fsync of the directory makes the rename itself durable.
void sync_dir(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

using Header = std::array<int32_t, kShardHeaderInts>;

// Writes `header` with [2] the count, then count elements of elem_bytes each, atomically.
void write_with_header(const std::string& path, Header header, const void* data, size_t count,
                       size_t elem_bytes) {
  if (count > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    fail_usage("shard " + path + ": " + std::to_string(count) + " tokens do not fit the int32 count");
  }
  header[2] = static_cast<int32_t>(count);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_shard(tmp, std::string("cannot create: ") + std::strerror(errno));
  try {
    write_all(fd, reinterpret_cast<const char*>(header.data()), sizeof(header), tmp);
    write_all(fd, static_cast<const char*>(data), count * elem_bytes, tmp);
    if (::fsync(fd) != 0) fail_shard(tmp, std::string("fsync failed: ") + std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail_shard(path, std::string("cannot rename from ") + tmp + ": " + std::strerror(err));
  }
  sync_dir(path);
}

// The bytes of one element of a file of `version` (0: a version not read).
using ElementBytes = int64_t (*)(int32_t version);

// Checks the header {magic, version, count, ...} and that the file holds exactly count elements of
// elem_bytes(version) bytes; `versions` names the versions read.
Header read_checked_header(const std::string& path, int32_t magic, ElementBytes elem_bytes,
                           const std::string& versions) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_shard(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  Header header;
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const ssize_t got = stat_ok ? ::pread(fd, header.data(), sizeof(header), 0) : -1;
  ::close(fd);
  if (!stat_ok || got < 0) fail_shard(path, std::string("cannot read: ") + std::strerror(errno));
  if (got < kShardHeaderBytes) {
    fail_shard(path, "file is " + std::to_string(st.st_size) + " bytes, shorter than the " +
                         std::to_string(kShardHeaderBytes) + "-byte header");
  }
  if (header[0] != magic) {
    fail_shard(path, "bad magic " + std::to_string(header[0]) + " (expected " + std::to_string(magic) + ")");
  }
  const int64_t width = elem_bytes(header[1]);
  if (width == 0)
    fail_shard(path, "bad version " + std::to_string(header[1]) + " (expected " + versions + ")");
  if (header[2] < 0) fail_shard(path, "negative token count " + std::to_string(header[2]));
  const int64_t expected = kShardHeaderBytes + int64_t{header[2]} * width;
  if (st.st_size != expected) {
    fail_shard(path, std::string(st.st_size < expected ? "truncated" : "oversized") + ": header says " +
                         std::to_string(header[2]) + " tokens of " + std::to_string(width) +
                         (width == 1 ? " byte" : " bytes") + ", expected " + std::to_string(expected) +
                         " bytes, file has " + std::to_string(st.st_size));
  }
  return header;
}

int64_t version_token_bytes(int32_t version) {
  return version == kShardVersion16 ? 2 : version == kShardVersion32 ? 4 : 0;
}

int64_t mask_value_bytes(int32_t version) {
  return version == kLossMaskVersion ? 1 : 0;
}

// The tokens at `width` bytes each, every one checked to fit.
template <typename T>
std::vector<T> narrowed(const std::string& path, const std::vector<int32_t>& tokens) {
  std::vector<T> out(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || static_cast<uint64_t>(tokens[i]) > std::numeric_limits<T>::max())
      throw std::logic_error("shard " + path + ": token " + std::to_string(tokens[i]) + " does not fit " +
                             std::to_string(sizeof(T) * 8) + " bits");
    out[i] = static_cast<T>(tokens[i]);
  }
  return out;
}

}  // namespace

void write_shard(const std::string& path, const std::vector<int32_t>& tokens, const ShardTokenizer& made_by) {
  const bool wide = shard_token_bytes(made_by) == 4;
  const Header header = {kShardMagic, wide ? kShardVersion32 : kShardVersion16, 0, made_by.vocab_size,
                         static_cast<int32_t>(made_by.fingerprint)};
  if (wide) {
    const std::vector<uint32_t> body = narrowed<uint32_t>(path, tokens);
    write_with_header(path, header, body.data(), body.size(), sizeof(uint32_t));
  } else {
    const std::vector<uint16_t> body = narrowed<uint16_t>(path, tokens);
    write_with_header(path, header, body.data(), body.size(), sizeof(uint16_t));
  }
}

ShardInfo open_shard(const std::string& path) {
  const Header h =
      read_checked_header(path, kShardMagic, version_token_bytes, "1: uint16 tokens, or 2: uint32");
  if (h[3] < 0) fail_shard(path, "negative tokenizer vocabulary size " + std::to_string(h[3]));
  return {path, h[2], version_token_bytes(h[1]), {h[3], static_cast<uint32_t>(h[4])}};
}

std::string loss_mask_path(const std::string& shard_path) {
  return std::filesystem::path(shard_path).replace_extension(".mask").string();
}

void write_loss_mask(const std::string& path, const std::vector<uint8_t>& mask, int64_t packed_seq_len) {
  const uint8_t max = max_loss_mask_value(packed_seq_len);
  if (std::any_of(mask.begin(), mask.end(), [&](uint8_t v) { return v > max; }))
    throw std::logic_error("loss mask " + path + ": values must be at most " + std::to_string(max));
  write_with_header(path, {kLossMaskMagic, kLossMaskVersion, 0, static_cast<int32_t>(packed_seq_len)},
                    mask.data(), mask.size(), sizeof(uint8_t));
}

int64_t check_loss_mask(const std::string& path, int64_t num_tokens) {
  const Header h = read_checked_header(path, kLossMaskMagic, mask_value_bytes, "1");
  if (h[2] != num_tokens) {
    fail_shard(path, "loss mask of " + std::to_string(h[2]) + " tokens, but its shard has " +
                         std::to_string(num_tokens));
  }
  if (h[3] < 0) fail_shard(path, "negative packed sequence length " + std::to_string(h[3]));
  return h[3];
}

bool shards_have_loss_masks(const std::vector<std::string>& shard_paths) {
  const auto has_mask = [](const std::string& p) { return std::filesystem::exists(loss_mask_path(p)); };
  const auto with = std::find_if(shard_paths.begin(), shard_paths.end(), has_mask);
  const auto without = std::find_if_not(shard_paths.begin(), shard_paths.end(), has_mask);
  if (with != shard_paths.end() && without != shard_paths.end()) {
    fail_shard(*without, "no loss mask " + loss_mask_path(*without) + " beside it, but " + *with +
                             " has one: shards of one run are all masked or none is");
  }
  return with != shard_paths.end();
}

bool masks_count_a_target(const std::vector<std::string>& shard_paths) {
  std::vector<char> chunk(1 << 20);
  for (const std::string& shard : shard_paths) {
    std::ifstream in(loss_mask_path(shard), std::ios::binary);
    // A shard's first token is no target of its own windows: its mask is skipped with the header.
    in.seekg(kShardHeaderBytes + 1);
    while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
      const auto end = chunk.begin() + in.gcount();
      if (std::any_of(chunk.begin(), end, [](char v) { return (v & kLossMaskCounted) != 0; })) return true;
    }
  }
  return false;
}

int64_t packed_seq_len(const std::vector<std::string>& shard_paths) {
  if (!shards_have_loss_masks(shard_paths)) return 0;
  const auto packed_for = [](const std::string& shard) {
    return check_loss_mask(loss_mask_path(shard), open_shard(shard).num_tokens);
  };
  const int64_t first = packed_for(shard_paths[0]);
  for (const std::string& shard : shard_paths) {
    if (const int64_t other = packed_for(shard); other != first) {
      fail_shard(shard, "packed for sequences of " + std::to_string(other) + " tokens, but " +
                            shard_paths[0] + " for " + std::to_string(first) +
                            ": prepare the shards of one run together");
    }
  }
  return first;
}

std::vector<std::string> find_shards(const std::string& dir_or_glob, const std::string& split) {
  const bool is_dir = std::filesystem::is_directory(dir_or_glob);
  const std::string pattern = is_dir ? dir_or_glob + "/*_" + split + "_*.bin" : dir_or_glob;
  glob_t matches{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<std::string> paths;
  if (rc == 0) paths.assign(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
  ::globfree(&matches);
  if (paths.empty()) {
    fail_data(is_dir ? "no " + split + " shards in " + dir_or_glob + " (expected files named *_" + split +
                           "_*.bin)"
                     : "no " + split + " shards match " + dir_or_glob);
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace mt
