// Reads samples of T+1 tokens from shards (targets are the inputs shifted by one), with the loss mask of the
// targets when the shards have one. Samples are numbered globally: sample g of a run is a pure function of
// (seed, epoch, g), so which sequences a step reads depends on its global batch only, never on how the step
// is split into micro-batches, accumulation or data-parallel ranks. The consumed sample count is all a
// checkpoint needs to resume.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/shard.h"

namespace mt {

struct LoaderConfig {
  int64_t seq_len = 1;  // T: a shard of n tokens holds floor((n - 1) / T) samples, at offsets k*T
  bool shuffle = true;  // permute the shard order and each shard's sample order every epoch, seeded
  uint64_t seed = 0;
  int32_t vocab_size = 0;  // tokens >= this are a data error naming the shard; also sets the window's width
  bool loss_mask = false;  // every shard has a loss mask (data/shard.h), read with its tokens
  bool packed = false;     // the masks are packed for seq_len: positions restart at each record's start
};

// Host rows of T for a run of samples, one row per sample: inputs and targets always, the loss mask
// (1: the loss counts that target) with LoaderConfig::loss_mask, positions (each token's position in its
// record) with LoaderConfig::packed.
struct SampleRows {
  int32_t* inputs = nullptr;
  int32_t* targets = nullptr;
  uint8_t* loss_mask = nullptr;
  int32_t* positions = nullptr;
};

class Loader {
 public:
  // window_buffer holds window_tokens(cfg) ids of window_token_bytes(cfg) each and is owned by the caller
  // (the memory plan's "other" category); the loader allocates nothing per batch. Shards of either width
  // (data/shard.h), mixed or not, are read through it: a sample of a wider shard than the window, in pieces.
  // All shards are scanned once at construction (through window_buffer) for ids >= vocab_size, and their
  // masks with cfg.loss_mask. Shards shorter than one sample, and shards whose masks disagree with
  // cfg.loss_mask, are data errors.
  Loader(std::vector<std::string> shard_paths, const LoaderConfig& cfg, void* window_buffer);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  static int64_t window_tokens(const LoaderConfig& cfg) { return cfg.seq_len + 1; }
  // The bytes of an id below the vocabulary: 4 past 16 bits' ids (kMost16BitIds), else 2.
  static int64_t window_token_bytes(const LoaderConfig& cfg) {
    return cfg.vocab_size > kMost16BitIds ? 4 : 2;
  }
  // Samples of seq_len targets in a shard of `tokens` (at least one token).
  static int64_t samples_in_shard(int64_t tokens, int64_t seq_len) { return (tokens - 1) / seq_len; }

  // Samples in one epoch: every shard's, together.
  int64_t samples_per_epoch() const;
  // CRC-32C of every shard's tokens and masks in path order, taken by the scan: what a checkpoint records
  // of the data, so that a resume on other data is named.
  uint32_t data_crc32c() const;
  // Samples [first, first + count) of the global order into rows 0..count-1 of `rows`; epochs follow one
  // another. Returns the targets the loss counts: those the masks mark, or all count*T.
  int64_t read(int64_t first, int64_t count, const SampleRows& rows);
  // The targets samples [first, first + count) count, reading their masks only (count*T without masks).
  int64_t count_targets(int64_t first, int64_t count);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace mt
