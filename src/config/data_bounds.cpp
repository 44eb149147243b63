#include "config/data_bounds.h"

#include <optional>
#include <string>
#include <vector>

#include "config/check_config.h"
#include "config/run_flag_table.h"
#include "core/error.h"
#include "core/int_math.h"
#include "data/loader.h"
#include "data/shard.h"
#include "model/spec.h"

namespace mt {

namespace {

// Sequences of `seq_len` targets the split's shards hold, as the loader counts its samples.
int64_t sequences_in(const TrainConfig& cfg, const std::string& split, int64_t seq_len) {
  int64_t sequences = 0;
  for (const std::string& path : find_shards(cfg.data, split))
    sequences += Loader::samples_in_shard(open_shard(path).num_tokens, seq_len);
  return sequences;
}

std::string tokens_text(int64_t sequences, int64_t seq_len) {
  return std::to_string(sequences) + " sequences of " + std::to_string(seq_len) + " tokens";
}

// The flags that set a step's sequences: the global batch when given, else the accumulation.
std::string step_flags(const TrainConfig& cfg, int64_t dp) {
  if (cfg.global_batch > 0) return flag_source_with_value(cfg, "--global-batch-size");
  const std::string per_step =
      flag_source_with_value(cfg, "--micro-batch-size") + " x " + std::to_string(dp) + " data-parallel ranks";
  if (cfg.grad_accum_steps == 0) return per_step;
  return flag_source_with_value(cfg, "--grad-accum-steps") + " x " + per_step;
}

}  // namespace

void check_data_bounds(const TrainConfig& cfg, int world) {
  check_flag_bounds(cfg, {"--micro-batch-size", "--seq-length", "--train-iters"});
  const int64_t seq_len =
      cfg.seq_len > 0 ? cfg.seq_len : resolve_model(cfg.model, cfg.pad_vocab_multiple).n_positions;
  const int64_t dp = data_parallel_size(cfg, world);
  const int64_t sequences = accumulation_steps(cfg, dp) * cfg.micro_batch * dp;  // checked there
  const std::string step = "a step of " + tokens_text(sequences, seq_len) + " (" + step_flags(cfg, dp) + ")";
  const std::optional<int64_t> step_tokens = product_if_fits(sequences, seq_len);
  if (!step_tokens) fail_usage(step + ": its tokens overflow 64 bits");
  if (!product_if_fits(*step_tokens, cfg.train_iters))
    fail_usage(flag_source_with_value(cfg, "--train-iters") + " x " + step +
               ": the run's tokens overflow 64 bits");
  const int64_t train_sequences = sequences_in(cfg, "train", seq_len);
  if (sequences > train_sequences)
    fail_usage(step + " is more than the " + tokens_text(train_sequences, seq_len) + " of --data " +
               cfg.data + "'s training shards");
  // An evaluation repeats the validation windows past the end of the split; the default's batches may, as
  // prepare holds out as little as one window, but more than both reads the same windows over and over.
  if (cfg.eval_interval == 0 || cfg.eval_iters <= TrainConfig{}.eval_iters) return;
  const std::optional<int64_t> eval_sequences = product_if_fits(cfg.eval_iters, cfg.micro_batch);
  const int64_t val_sequences = sequences_in(cfg, "val", seq_len);
  if (!eval_sequences || *eval_sequences > val_sequences)
    fail_usage(flag_source_with_value(cfg, "--eval-iters") + " x " +
               flag_source_with_value(cfg, "--micro-batch-size") +
               " sequences an evaluation are more than the " + tokens_text(val_sequences, seq_len) +
               " of --data " + cfg.data + "'s validation shards");
}

}  // namespace mt
