// Reads batches of B*T+1 token windows from shards, advancing by B*T (targets are inputs shifted by one),
// in order or in a seeded permutation of the windows, with the loss mask of the targets when the shards have
// one. Its cursor is all a checkpoint needs to resume.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/shard.h"

namespace mt {

struct LoaderCursor {
  int64_t epoch = 0;
  int64_t shard = 0;   // index into the epoch's shard order
  int64_t window = 0;  // index into the shard's window order
};

struct LoaderConfig {
  int64_t batch = 1;    // B
  int64_t seq_len = 1;  // T
  bool shuffle = true;  // permute shard order and window order each epoch, seeded
  uint64_t seed = 0;
  int32_t vocab_size = 0;  // tokens >= this are a data error naming the shard
  bool loss_mask = false;  // every shard has a loss mask (data/shard.h), read with its tokens
  bool packed = false;     // the masks are packed for seq_len: positions restart at each record's start
};

class Loader {
 public:
  // window_buffer holds window_tokens(cfg) uint16 values and is owned by the caller (the memory plan's
  // "other" category); the loader allocates nothing per batch. All shards are scanned once at construction
  // (through window_buffer) for ids >= vocab_size, and their masks with cfg.loss_mask. Shards shorter than
  // one window, and shards whose masks disagree with cfg.loss_mask, are data errors.
  Loader(std::vector<std::string> shard_paths, const LoaderConfig& cfg, uint16_t* window_buffer);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  static int64_t window_tokens(const LoaderConfig& cfg) { return cfg.batch * cfg.seq_len + 1; }

  // inputs[B*T], targets[B*T], with cfg.loss_mask loss_mask[B*T] (1: the loss counts that target) and with
  // cfg.packed positions[B*T] (each token's position in its record); moves the cursor on (to the next epoch
  // after the last window). Returns the targets the loss counts: those the mask marks, or all B*T.
  int64_t next_batch(int32_t* inputs, int32_t* targets, uint8_t* loss_mask = nullptr,
                     int32_t* positions = nullptr);
  // Moves the cursor past one batch without reading it (the batches other data-parallel ranks take).
  void skip_batch();

  const LoaderCursor& cursor() const { return cursor_; }
  void set_cursor(const LoaderCursor& cursor);  // out-of-range is a data error
  void reset() { set_cursor(LoaderCursor{}); }
  int64_t windows_in_shard(int64_t shard_index) const;

 private:
  struct Impl;
  Impl* impl_;
  LoaderCursor cursor_;
};

}  // namespace mt
