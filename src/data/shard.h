// Token shards in llm.c's format: a header of 256 int32 (magic 20240520, version 1, token count, rest zero),
// then the tokens as uint16.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mt {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion = 1;
constexpr int64_t kShardHeaderInts = 256;

// Writes atomically (temporary file, fsync, rename): a crash never leaves a half-written shard.
void write_shard(const std::string& path, const std::vector<uint16_t>& tokens);

// Opens and checks a shard without loading its tokens: magic, version, size matches the count.
// Every failure is a data error naming the file.
struct ShardInfo {
  std::string path;
  int64_t num_tokens = 0;
};
ShardInfo open_shard(const std::string& path);

// The shards of one split in a directory (files named *_train_*.bin or *_val_*.bin, sorted), or the files a
// glob pattern matches. No match is a data error naming the directory or pattern.
std::vector<std::string> find_shards(const std::string& dir_or_glob, const std::string& split);

}  // namespace mt
