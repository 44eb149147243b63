#include "train/train_flags.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace mt {

int64_t accumulation_steps(const TrainConfig& c, int64_t data_parallel) {
  if (c.grad_accum_steps < 0) fail_usage("--grad-accum-steps must be positive");
  if (c.global_batch < 0) fail_usage("--global-batch-size must be positive");
  const int64_t per_step = c.micro_batch * data_parallel;
  if (c.global_batch == 0) return std::max<int64_t>(c.grad_accum_steps, 1);
  if (c.global_batch % per_step != 0)
    fail_usage("--global-batch-size " + std::to_string(c.global_batch) + " is not divisible by micro-batch " +
               std::to_string(c.micro_batch) + " x data-parallel size " + std::to_string(data_parallel));
  const int64_t k = c.global_batch / per_step;
  if (c.grad_accum_steps != 0 && c.grad_accum_steps != k)
    fail_usage("--grad-accum-steps " + std::to_string(c.grad_accum_steps) +
               " disagrees with --global-batch-size " + std::to_string(c.global_batch) + " (" +
               std::to_string(k) + " micro-batches of " + std::to_string(c.micro_batch) + ")");
  return k;
}

void check_parallel_flags(const TrainConfig& c) {
  if (c.zero_stage < 0 || c.zero_stage > 3) fail_usage("--zero-stage must be 0, 1, 2 or 3");
  if (!(c.bucket_size_mb > 0)) fail_usage("--bucket-size-mb must be positive");
  if (c.zero_stage == 3 && !c.save_weights.empty())
    fail_usage(
        "--save-weights with --zero-stage 3: no rank holds whole weights to write; use --save DIR (every "
        "rank "
        "writes its part of the checkpoint's model.safetensors) and `memtrain export`");
  if (c.offload_optimizer == OffloadOptimizer::nvme && c.offload_path.empty())
    fail_usage("--offload-optimizer nvme needs --offload-path DIR");
  if (!(c.offload_chunk_mb > 0)) fail_usage("--offload-chunk-mb must be positive");
}

void check_flags(const TrainConfig& c, const ModelSpec& spec, int64_t seq_len) {
  if (c.train_iters <= 0) fail_usage("--train-iters must be a positive number of steps");
  if (c.micro_batch <= 0) fail_usage("--micro-batch-size must be positive");
  check_precision(c.precision);
  if (c.static_loss_scale != 0 && c.precision.precision != Precision::fp16)
    fail_usage("--loss-scale needs --fp16 (bf16 and fp32 train without loss scaling)");
  if (c.static_loss_scale < 0) fail_usage("--loss-scale must be positive");
  const LossScalerConfig& s = c.loss_scaler;
  if (!(s.min_scale > 0)) fail_usage("--min-loss-scale must be positive");
  if (!(s.initial_scale >= s.min_scale) || !std::isfinite(s.initial_scale))
    fail_usage("--initial-loss-scale must be finite and at least --min-loss-scale");
  if (s.window <= 0) fail_usage("--loss-scale-window must be positive");
  if (s.hysteresis <= 0) fail_usage("--hysteresis must be positive");
  if (seq_len <= 0) fail_usage("--seq-length must be positive");
  if (seq_len > spec.n_positions)
    fail_usage("--seq-length " + std::to_string(seq_len) + " exceeds the model's " +
               std::to_string(spec.n_positions) + " positions (n_positions)");
  if (c.log_interval <= 0) fail_usage("--log-interval must be positive");
  if (c.eval_interval < 0) fail_usage("--eval-interval must be 0 (off) or positive");
  if (c.eval_interval > 0 && c.eval_iters <= 0) fail_usage("--eval-iters must be positive when evaluating");
  if (c.threads < 0) fail_usage("--threads must be 0 (all cores) or positive");
  if (c.lr < 0 || c.min_lr < 0 || c.min_lr > c.lr)
    fail_usage("--lr and --min-lr must satisfy 0 <= min-lr <= lr");
  if (c.warmup_iters < 0) fail_usage("--lr-warmup-iters must not be negative");
  if (c.adam.beta1 < 0 || c.adam.beta1 >= 1 || c.adam.beta2 < 0 || c.adam.beta2 >= 1)
    fail_usage("--adam-beta1 and --adam-beta2 must be in [0, 1)");
  if (c.adam.eps <= 0) fail_usage("--adam-eps must be positive");
  if (c.adam.clip_grad < 0) fail_usage("--clip-grad must be 0 (off) or positive");
}

int rank_threads(const TrainConfig& c, int world) {
  if (c.threads > 0) return c.threads;
  return world > 1 ? 1 : omp_get_max_threads();
}

void check_checkpoint_flags(const TrainConfig& c) {
  if (c.save_interval < 0) fail_usage("--save-interval must be 0 (only at the end) or positive");
  if (c.keep_checkpoints < 0) fail_usage("--keep-checkpoints must be 0 (all) or positive");
  if (c.exit_interval < 0) fail_usage("--exit-interval must be positive");
  if (c.save.empty() && c.save_interval > 0) fail_usage("--save-interval needs --save DIR");
  if (c.save.empty() && c.exit_interval > 0)
    fail_usage("--exit-interval saves before it exits: it needs --save DIR");
  if (c.resume == ResumeMode::automatic && c.save.empty())
    fail_usage("--resume auto looks in the --save directory: give --save");
  if (c.resume != ResumeMode::off && !c.load.empty())
    fail_usage("--resume auto and --load exclude each other");
  if (c.verify_resume < 0) fail_usage("--verify-resume must be a positive number of steps");
  if (c.verify_resume > 0 && c.verify_resume >= c.train_iters)
    fail_usage("--verify-resume " + std::to_string(c.verify_resume) + " must be below --train-iters " +
               std::to_string(c.train_iters) + " (steps after the save are what it compares)");
  if (c.verify_resume > 0 && (!c.load.empty() || c.resume != ResumeMode::off || !c.save.empty()))
    fail_usage(
        "--verify-resume saves into OUT/verify-resume and starts fresh: drop --save, --load and --resume");
}

}  // namespace mt
