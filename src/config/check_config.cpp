#include "config/check_config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "config/run_flag_table.h"
#include "core/error.h"
#include "core/int_math.h"
#include "devices/devices.h"

namespace mt {

namespace {

void check_parallel_flags(const TrainConfig& c) {
  check_flag_bounds(c, {"--zero-stage", "--bucket-size-mb", "--distributed-timeout-minutes"});
  if (c.zero_stage == 3 && !c.save_weights.empty())
    fail_usage(
        "--save-weights with --zero-stage 3: no rank holds whole weights to write; use --save DIR (every "
        "rank "
        "writes its part of the checkpoint's model.safetensors) and `memtrain export`");
  if (c.offload_optimizer == OffloadOptimizer::nvme && c.offload_path.empty())
    fail_usage("--offload-optimizer nvme needs --offload-path DIR");
  check_flag_bounds(c, {"--offload-chunk-mb"});
}

void check_checkpoint_flags(const TrainConfig& c) {
  check_flag_bounds(c, {"--save-interval", "--keep-checkpoints", "--exit-interval"});
  if (c.save.empty() && c.save_interval > 0) fail_usage("--save-interval needs --save DIR");
  if (c.save.empty() && c.exit_interval > 0)
    fail_usage("--exit-interval saves before it exits: it needs --save DIR");
  if (c.resume == ResumeMode::automatic && c.save.empty())
    fail_usage("--resume auto looks in the --save directory: give --save");
  if (c.resume != ResumeMode::off && !c.load.empty())
    fail_usage("--resume auto and --load exclude each other");
  check_flag_bounds(c, {"--verify-resume"});
  if (c.verify_resume > 0 && c.verify_resume >= c.train_iters)
    fail_usage("--verify-resume " + std::to_string(c.verify_resume) + " must be below --train-iters " +
               std::to_string(c.train_iters) + " (steps after the save are what it compares)");
  if (c.verify_resume > 0 && (!c.load.empty() || c.resume != ResumeMode::off || !c.save.empty()))
    fail_usage(
        "--verify-resume saves into OUT/verify-resume and starts fresh: drop --save, --load and --resume");
}

// Adam-mini holds its fp32 second moments whole, in memory, for a whole model's partition (its first moment
// in any moment dtype), stepped on every rank: what would need more is refused by name
// (docs/optimizer_states.md).
void check_adam_mini_flags(const TrainConfig& c) {
  if (c.optimizer != OptimizerKind::adam_mini) return;
  const std::string mini = "--optimizer adam-mini with ";
  if (c.tensor_parallel > 1 || c.pipeline_parallel > 1)
    fail_usage(mini +
               (c.tensor_parallel > 1 ? flag_source_with_value(c, "--tensor-model-parallel-size")
                                      : flag_source_with_value(c, "--pipeline-model-parallel-size")) +
               ": Adam-mini's blocks are a whole model's; use data parallelism");
  if (c.offload_optimizer == OffloadOptimizer::nvme)
    fail_usage(mini + "--offload-optimizer nvme: Adam-mini's state is held in memory");
  if (c.lora.enabled()) fail_usage(mini + "--lora-rank: Adam-mini trains every parameter; use adamw");
  if (c.precision.o2_stochastic_rounding)
    fail_usage(mini + "--o2-stochastic-rounding: Adam-mini rounds its bf16 first moment to nearest");
}

// What the GPU backend does not run yet is refused by its flag before anything is planned for it.
void check_gpu_flags(const TrainConfig& c) {
  if (device_kind(c.device) != DeviceKind::cuda) {
    if (c.tf32)
      fail_usage("--tf32 with --device " + c.device +
                 ": TF32 is a GPU's mode for fp32 products (--device cuda)");
    return;
  }
  const std::string gpu = "--device " + c.device + " with ";
  const auto refuse = [&](const std::string& flag) {
    fail_usage(gpu + flag_source_with_value(c, flag) +
               ": not on the GPU yet; train it on the CPU (--device cpu)");
  };
  if (c.optimizer == OptimizerKind::adam_mini) refuse("--optimizer");
  if (c.offload_optimizer == OffloadOptimizer::nvme) refuse("--offload-optimizer");
}

}  // namespace

void check_config(const TrainConfig& c) {
  check_device(c.device);
  check_gpu_flags(c);
  check_parallel_flags(c);
  check_checkpoint_flags(c);
  check_adam_mini_flags(c);
}

int64_t accumulation_steps(const TrainConfig& c, int64_t data_parallel) {
  check_flag_bounds(c, {"--micro-batch-size", "--grad-accum-steps", "--global-batch-size"});
  const std::string micro = flag_source_with_value(c, "--micro-batch-size"),
                    global = flag_source_with_value(c, "--global-batch-size"),
                    accum = flag_source_with_value(c, "--grad-accum-steps");
  const int64_t k = std::max<int64_t>(c.grad_accum_steps, 1);
  const std::optional<int64_t> per_step = product_if_fits(c.micro_batch, data_parallel);
  if (!per_step || (c.global_batch == 0 && !product_if_fits(*per_step, k)))
    fail_usage((c.global_batch == 0 ? accum + " x " : "") + micro + " x data-parallel size " +
               std::to_string(data_parallel) + ": the sequences of a step overflow 64 bits");
  if (c.global_batch == 0) return k;
  if (c.global_batch % *per_step != 0)
    fail_usage(global + " is not divisible by " + micro + " x data-parallel size " +
               std::to_string(data_parallel));
  const int64_t made = c.global_batch / *per_step;
  if (c.grad_accum_steps != 0 && c.grad_accum_steps != made)
    fail_usage(accum + " disagrees with " + global + " (" + std::to_string(made) + " micro-batches of " +
               std::to_string(c.micro_batch) + " x data-parallel size " + std::to_string(data_parallel) +
               ")");
  return made;
}

int data_parallel_size(const TrainConfig& c, int world) {
  check_flag_bounds(c, {"--tensor-model-parallel-size", "--pipeline-model-parallel-size"});
  const int model_parallel = c.tensor_parallel * c.pipeline_parallel;
  if (world % model_parallel != 0) {
    const std::string tp = "--tensor-model-parallel-size " + std::to_string(c.tensor_parallel),
                      pp = "--pipeline-model-parallel-size " + std::to_string(c.pipeline_parallel);
    const std::string flags = c.pipeline_parallel == 1 ? tp : c.tensor_parallel == 1 ? pp : tp + " x " + pp;
    fail_usage(flags + " does not divide the world of " + std::to_string(world) + " ranks");
  }
  return world / model_parallel;
}

void check_optimizer_in_backward(const TrainConfig& c, int64_t accumulation) {
  if (!c.optimizer_in_backward) return;
  const auto refuse = [](bool given, const std::string& other, const std::string& why) {
    if (given) fail_usage("--optimizer-in-backward with " + other + ": " + why);
  };
  refuse(accumulation > 1,
         "gradient accumulation (" + std::to_string(accumulation) + " micro-batches a step)",
         "the update would need the gradients of every micro-batch kept; raise --micro-batch-size instead");
  refuse(c.tensor_parallel > 1, flag_source_with_value(c, "--tensor-model-parallel-size"),
         "not scheduled block by block yet; use data parallelism");
  refuse(c.pipeline_parallel > 1, flag_source_with_value(c, "--pipeline-model-parallel-size"),
         "not scheduled block by block yet; use data parallelism");
  refuse(c.offload_optimizer != OffloadOptimizer::none, "--offload-optimizer",
         "the offloaded state is streamed once a step, not block by block");
}

void check_pipeline_parallel_flags(const TrainConfig& c, const ModelSpec& spec) {
  const int64_t pp = c.pipeline_parallel;
  if (pp == 1) return;
  const std::string flag = "--pipeline-model-parallel-size " + std::to_string(pp);
  if (spec.n_layer % pp != 0)
    fail_usage(flag + " must divide the model's " + std::to_string(spec.n_layer) +
               " layers (the stages hold equal runs of them)");
  // As DeepSpeed: gradients and weights partitioned over the data-parallel ranks would be exchanged once per
  // micro-batch of every stage, which the pipeline's schedule does not leave room for.
  if (c.zero_stage >= 2)
    fail_usage(flag + " with --zero-stage " + std::to_string(c.zero_stage) +
               ": pipeline parallelism works with ZeRO stages 0 and 1 only");
  const auto refuse = [&](bool given, const std::string& other) {
    if (given) fail_usage(flag + " with " + other + ": not run under pipeline parallelism yet");
  };
  refuse(c.lora.enabled(), "--lora-rank");
  refuse(c.offload_optimizer != OffloadOptimizer::none, "--offload-optimizer");
}

void check_tensor_parallel_flags(const TrainConfig& c, const ModelSpec& spec, int64_t seq_len) {
  const int64_t tp = c.tensor_parallel;
  if (c.sequence_parallel && tp == 1)
    fail_usage("--sequence-parallel needs --tensor-model-parallel-size N > 1");
  if (tp == 1) return;
  if (c.sequence_parallel && c.micro_batch * seq_len % tp != 0)
    fail_usage("--sequence-parallel: --tensor-model-parallel-size " + std::to_string(tp) +
               " must divide the micro-batch's " + std::to_string(c.micro_batch * seq_len) +
               " tokens (--micro-batch-size x --seq-length)");
  const std::string flag = "--tensor-model-parallel-size " + std::to_string(tp);
  for (const auto& [count, what] :
       {std::pair{spec.n_head, "attention heads"}, std::pair{spec.n_kv_head, "key/value heads"},
        std::pair{spec.intermediate_size, "MLP width"},
        std::pair{spec.padded_vocab_size, "padded vocabulary"}})
    if (count % tp != 0)
      fail_usage(
          flag + " must divide the model's " + std::to_string(count) + " " + what +
          (std::string_view(what) == "padded vocabulary" ? " (see --make-vocab-size-divisible-by)" : ""));
  const auto refuse = [&](bool given, const std::string& other) {
    if (given) fail_usage(flag + " with " + other + ": not run under tensor parallelism yet");
  };
  refuse(c.lora.enabled(), "--lora-rank");
  refuse(c.offload_optimizer != OffloadOptimizer::none, "--offload-optimizer");
}

void check_flags(const TrainConfig& c, const ModelSpec& spec, int64_t seq_len) {
  check_tensor_parallel_flags(c, spec, seq_len);
  check_pipeline_parallel_flags(c, spec);
  check_flag_bounds(c, {"--train-iters", "--micro-batch-size"});
  check_precision(c.precision);
  if (c.static_loss_scale != 0 && c.precision.precision != Precision::fp16)
    fail_usage("--loss-scale needs --fp16 (bf16 and fp32 train without loss scaling)");
  check_flag_bounds(c, {"--loss-scale", "--min-loss-scale"});
  const LossScalerConfig& s = c.loss_scaler;
  if (!(s.initial_scale >= s.min_scale) || !std::isfinite(s.initial_scale))
    fail_usage("--initial-loss-scale must be finite and at least --min-loss-scale");
  check_flag_bounds(c, {"--loss-scale-window", "--hysteresis"});
  if (seq_len <= 0) fail_usage("--seq-length must be positive");
  if (seq_len > spec.n_positions)
    fail_usage("--seq-length " + std::to_string(seq_len) + " exceeds the model's " +
               std::to_string(spec.n_positions) + " positions (n_positions)");
  check_flag_bounds(c, {"--log-interval", "--eval-interval"});
  if (c.eval_interval > 0 && c.eval_iters <= 0) fail_usage("--eval-iters must be positive when evaluating");
  check_flag_bounds(c, {"--threads"});
  check_flag_bounds(c, {"--lr", "--min-lr"});
  if (c.min_lr > c.lr) fail_usage("--lr and --min-lr must satisfy 0 <= min-lr <= lr");
  check_flag_bounds(c, {"--lr-warmup-iters", "--weight-decay"});
  // AdamW's decay scales each weight by 1 - lr x weight decay a step: at 1 or more it zeroes or flips them,
  // which would surface only as a diverged step blamed on --lr.
  if (const double product = static_cast<double>(c.lr) * c.adam.weight_decay; product >= 1.0) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "--weight-decay %g with --lr %g: lr x weight decay is %g, expected below 1",
                  static_cast<double>(c.adam.weight_decay), static_cast<double>(c.lr), product);
    fail_usage(std::string(text) + " (each step scales the weights by 1 - lr x weight decay)");
  }
  for (const float beta : {c.adam.beta1, c.adam.beta2})
    if (!(beta >= 0 && beta < 1)) fail_usage("--adam-beta1 and --adam-beta2 must be in [0, 1)");
  check_flag_bounds(c, {"--adam-eps", "--clip-grad"});
}

void check_lora_flags(const TrainConfig& c, const std::set<std::string, std::less<>>& given) {
  for (const char* flag : {"--lora-alpha", "--lora-rslora", "--lora-dropout", "--lora-target",
                           "--lora-train-modules", "--init-adapter", "--save-adapter"})
    if (given.contains(flag) && !c.lora.enabled()) fail_usage(std::string(flag) + " needs --lora-rank R");
  if (c.base_quant.enabled() && !c.lora.enabled())
    fail_usage("--base-quant " + std::string(kBaseQuantNames.name(c.base_quant.format)) +
               " stores LoRA's frozen base: it needs --lora-rank R");
  if (given.contains("--no-double-quant") && !c.base_quant.enabled())
    fail_usage("--no-double-quant needs --base-quant nf4 or int8");
  if (!c.lora.enabled()) return;
  check_flag_bounds(c, {"--lora-rank", "--lora-alpha", "--lora-dropout"});
  if (c.lora.dropout == 1) fail_usage("--lora-dropout must be in [0, 1)");  // the bound's high end is closed
  if (!c.save_weights.empty())
    fail_usage(
        "--save-weights with --lora-rank: weight files do not hold adapters yet; use --save-adapter DIR");
  if (!c.save_adapter.empty() && !c.lora.train_modules.empty())
    fail_usage("--save-adapter with --lora-train-modules: PEFT's modules_to_save are not written yet");
  if (!c.save_adapter.empty() && c.zero_stage == 3)
    fail_usage(
        "--save-adapter with --zero-stage 3: no rank holds the whole adapters to write; use --save DIR");
}

int rank_threads(const TrainConfig& c, int world) {
  if (c.threads > 0) return c.threads;
  return world > 1 ? 1 : process_threads();
}

}  // namespace mt
