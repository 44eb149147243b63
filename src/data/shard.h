// Token shards in llm.c's format: a header of 256 int32, then the tokens. The header:
//   [0] magic 20240520
//   [1] version: 1 for uint16 tokens, 2 for uint32 tokens (llm.c's own convention: GPT-2's vs LLaMA-3's)
//   [2] the token count
//   [3] the vocabulary size of the tokenizer that made the shard, 0 when not recorded (llm.c's shards, and
//       memtrain's from before it was recorded)
//   [4] that tokenizer's fingerprint (Tokenizer::fingerprint, a CRC-32C, as the int32 of its bits)
//   rest zero.
// A shard may have a loss mask beside it (X.bin -> X.mask): the same header with magic 20261201, version 1
// and [3] the sequence length its records were packed for (0: not packed), then one uint8 per token of X.bin:
// bit 0 set when the loss counts that token as a target (it is predicted from the tokens before it), bit 1,
// in packed masks only, when the token starts a record.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mt {

constexpr int32_t kShardMagic = 20240520;
constexpr int32_t kShardVersion16 = 1, kShardVersion32 = 2;
constexpr int64_t kShardHeaderInts = 256;
constexpr int64_t kShardHeaderBytes = kShardHeaderInts * sizeof(int32_t);
// Tokenizers of more ids than this write 32-bit shards.
constexpr int32_t kMost16BitIds = 65536;

// The tokenizer a shard records having made it.
struct ShardTokenizer {
  int32_t vocab_size = 0;  // 0: not recorded
  uint32_t fingerprint = 0;
  bool recorded() const { return vocab_size > 0; }
  bool operator==(const ShardTokenizer&) const = default;
};

// The bytes of each token in a shard made by `made_by`: 4 when it has more than kMost16BitIds ids, else 2.
inline int64_t shard_token_bytes(const ShardTokenizer& made_by) {
  return made_by.vocab_size > kMost16BitIds ? 4 : 2;
}

// Writes atomically (temporary file, fsync, rename): a crash never leaves a half-written shard. Version 2
// (uint32) or 1 (uint16) as shard_token_bytes(made_by) says; a token that is negative or does not fit that
// width is a logic error.
void write_shard(const std::string& path, const std::vector<int32_t>& tokens,
                 const ShardTokenizer& made_by = {});

constexpr int32_t kLossMaskMagic = 20261201;
constexpr int32_t kLossMaskVersion = 1;
constexpr uint8_t kLossMaskCounted = 1, kLossMaskRecordStart = 2;

// The loss mask beside the token shard at shard_path: its .bin replaced by .mask (not *.bin, so that
// find_shards never takes it for a shard).
std::string loss_mask_path(const std::string& shard_path);
// Atomically, as write_shard; a value with bits other than the two (or a record start in a mask that is not
// packed) is a logic error.
void write_loss_mask(const std::string& path, const std::vector<uint8_t>& mask, int64_t packed_seq_len = 0);
// Checks a mask's header and size against the shard's token count, as open_shard does; data errors name it.
// Returns the sequence length it was packed for (0: not packed).
int64_t check_loss_mask(const std::string& path, int64_t num_tokens);
// The value a mask of packed_seq_len may hold at most.
inline uint8_t max_loss_mask_value(int64_t packed_seq_len) {
  return packed_seq_len > 0 ? kLossMaskCounted | kLossMaskRecordStart : kLossMaskCounted;
}
// Whether the shards have loss masks: true when all do, false when none does, a data error naming a shard
// without one when only some do.
bool shards_have_loss_masks(const std::vector<std::string>& shard_paths);
// Whether the masks beside the shards count any target (masks that packed_seq_len has checked).
bool masks_count_a_target(const std::vector<std::string>& shard_paths);
// The sequence length the shards' masks were packed for: 0 when they are not packed (or have no masks), a
// data error naming two shards that differ.
int64_t packed_seq_len(const std::vector<std::string>& shard_paths);

// Opens and checks a shard without loading its tokens: magic, version, size matches the count and the
// version's width. Every failure is a data error naming the file.
struct ShardInfo {
  std::string path;
  int64_t num_tokens = 0;
  int64_t token_bytes = 2;  // 2 (version 1) or 4 (version 2)
  ShardTokenizer made_by;
};
ShardInfo open_shard(const std::string& path);

// The shards of one split in a directory (files named *_train_*.bin or *_val_*.bin, sorted), or the files a
// glob pattern matches. No match is a data error naming the directory or pattern.
std::vector<std::string> find_shards(const std::string& dir_or_glob, const std::string& split);

}  // namespace mt
