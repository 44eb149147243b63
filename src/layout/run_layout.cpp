#include "layout/run_layout.h"

#include <algorithm>
#include <string>

#include "config/check_config.h"
#include "core/error.h"
#include "core/int_math.h"
#include "memory/precision.h"

namespace mt {

namespace {

// Planning holds every tensor and op of the step, about 15 KB a layer; far past the deepest published models
// (about 130 layers) a layer count is refused before that memory is taken.
constexpr int64_t kMaxPlannedLayers = 100'000;

int64_t run_seq_len(const TrainConfig& cfg, const ModelSpec& spec) {
  return cfg.seq_len != 0 ? cfg.seq_len : spec.n_positions;
}

[[noreturn]] void fail_too_deep(const TrainConfig& cfg, const ModelSpec& spec) {
  fail_usage("--model " + cfg.model + " has " + std::to_string(spec.n_layer) +
             " layers: memtrain plans at most " + std::to_string(kMaxPlannedLayers));
}

// The sizes that reach the table's shapes as products rather than shapes: the batch's tokens (and the
// loaders' windows, one more) and the kernels' scratch, a few rows of T by the head size per thread.
void check_scalar_sizes(const TrainConfig& cfg, const ModelSpec& spec, int64_t T, int threads) {
  checked_add(checked_mul(cfg.micro_batch, T), 1);
  checked_mul(checked_mul(T, checked_add(spec.head_dim(), 64)), 32 * static_cast<int64_t>(threads));
}

// The run's graph and table, and the plan of its tensors (plan_tensors: no model states yet).
RunLayout lay_out_tensors(const TrainConfig& cfg, const ModelSpec& spec, const ParallelRank& place,
                          const DeviceTarget& device, ArenaPackCache* cache) {
  RunLayout run;
  run.spec = spec;
  run.seq_len = run_seq_len(cfg, run.spec);
  run.accum = accumulation_steps(cfg, place.dp);
  const int64_t B = cfg.micro_batch, T = run.seq_len;
  check_scalar_sizes(cfg, run.spec, T, device.threads);

  const ModelStatePolicy policy = model_state_policy(cfg.precision);
  const DeviceTraits traits = device_traits(device, policy.weights, T, run.spec.head_dim());
  run.model = build_model_graph(run.spec, {.batch = B,
                                           .seq_len = T,
                                           .device = traits,
                                           .dtype = policy.weights,
                                           .recompute = cfg.recompute,
                                           .lora = cfg.lora,
                                           .base_quant = cfg.base_quant,
                                           .seed = cfg.seed,
                                           .loss_mask = cfg.loss_mask,
                                           .packed = cfg.packed,
                                           .tp = cfg.tensor_parallel,
                                           .tp_rank = place.tp_rank,
                                           .sequence_parallel = cfg.sequence_parallel,
                                           .pp = cfg.pipeline_parallel,
                                           .pp_rank = place.pp_rank,
                                           .micro_batches = run.accum});
  const int32_t vocab = static_cast<int32_t>(run.spec.vocab_size);
  run.train_data = {T, cfg.shuffle, cfg.seed, vocab, cfg.loss_mask, cfg.packed};
  run.val_data = {T, false, cfg.seed, vocab, cfg.loss_mask, cfg.packed};
  TensorTable& table = run.model.graph.table;
  // The host reads shards through the loaders' windows and checksums files through the checkpoint stream:
  // host memory, whatever the device.
  const auto host_buffer = [&](const std::string& name, int64_t elements, DType dtype) {
    return table.add({.name = name, .shape = {elements}, .dtype = dtype, .space = MemorySpace::host});
  };
  // Ids of a vocabulary past 16 bits take 4 bytes in the window (data/loader.h).
  const DType window_dtype = Loader::window_token_bytes(run.train_data) == 4 ? DType::i32 : DType::u16;
  run.train_window = host_buffer("loader.train.window", Loader::window_tokens(run.train_data), window_dtype);
  if (cfg.eval_interval > 0)
    run.val_window = host_buffer("loader.val.window", Loader::window_tokens(run.val_data), window_dtype);
  // Checkpoints stream tensors straight from the model states; reading files back to checksum them goes
  // through this buffer, at most one tensor (and 1 MiB) in size.
  if (!cfg.save.empty() || !cfg.load.empty() || cfg.resume != ResumeMode::off || cfg.verify_resume > 0) {
    int64_t largest = 1;
    for (int id : run.model.params) largest = std::max(largest, table[id].numel());
    run.checkpoint_stream = host_buffer("checkpoint.stream", std::min<int64_t>(largest, 1 << 18), DType::f32);
  }
  if (cfg.optimizer == OptimizerKind::adam_mini)
    run.mini_blocks = adam_mini_blocks(run.spec, table, run.model.params);
  // The update in the backward sums each block's gradients itself: the windows without ZeRO-2's gradient
  // sums, and with stage 3's gathered weights.
  const int schedule_stage = place.dp == 1                                     ? 0
                             : cfg.optimizer_in_backward && cfg.zero_stage < 3 ? 1
                                                                               : cfg.zero_stage;
  run.zero = add_zero_schedule(run.model.graph, schedule_stage, policy.grads, !cfg.optimizer_in_backward);
  if (cfg.optimizer_in_backward)
    run.backward_updates = add_block_gradients(run.model.graph, run.zero, policy.grads, policy.moment_block);
  run.plan = plan_tensors(table, traits.alignment, policy.weights, cache);
  run.plan.commit_granularity = traits.commit_granularity;
  return run;
}

// The usage error for a plan whose byte counts overflow (SizeOverflow), naming the flags and the model's
// sizes behind them.
[[noreturn]] void fail_plan_overflow(const TrainConfig& cfg, const ModelSpec& spec) {
  fail_usage("the memory plan's byte counts overflow 64 bits: --micro-batch-size " +
             std::to_string(cfg.micro_batch) + " x --seq-length " + std::to_string(run_seq_len(cfg, spec)) +
             " with --model " + cfg.model + " (" + std::to_string(spec.n_layer) + " layers, hidden size " +
             std::to_string(spec.n_embd) + ", MLP width " + std::to_string(spec.intermediate_size) +
             ", vocabulary " + std::to_string(spec.padded_vocab_size) +
             "); lower --micro-batch-size or --seq-length");
}

}  // namespace

ModelSpec check_layout(const TrainConfig& cfg, const ParallelRank& place) {
  const ModelSpec spec = resolve_model(cfg.model, cfg.pad_vocab_multiple);
  check_flags(cfg, spec, run_seq_len(cfg, spec));
  if (spec.n_layer > kMaxPlannedLayers) fail_too_deep(cfg, spec);
  check_optimizer_in_backward(cfg, accumulation_steps(cfg, place.dp));
  return spec;
}

RunLayout lay_out_graph(const TrainConfig& cfg, const ParallelRank& place, const DeviceTarget& device,
                        ArenaPackCache* cache) {
  const ModelSpec spec = check_layout(cfg, place);
  try {
    return lay_out_tensors(cfg, spec, place, device, cache);
  } catch (const SizeOverflow&) {
    fail_plan_overflow(cfg, spec);
  }
}

void plan_model_states(Plan& plan, const TrainConfig& cfg, const ModelSpec& spec, const ParallelRank& place,
                       int64_t comm_buffer_bytes, int64_t v_blocks) {
  ModelStatePolicy policy = model_state_policy(cfg.precision);
  policy.v_blocks = v_blocks;
  policy.grads_in_backward = cfg.optimizer_in_backward;
  const Sharding sharding{.dp = place.dp,
                          .dp_rank = place.dp_rank,
                          .stage = cfg.zero_stage,
                          .bucket_elems = static_cast<int64_t>(cfg.bucket_size_mb * (1 << 20) / 4),
                          .comm_internal_bytes = comm_buffer_bytes};
  const OptimizerOffload offload{.enabled = cfg.offload_optimizer == OffloadOptimizer::nvme,
                                 .path = cfg.offload_path,
                                 .chunk_elems = static_cast<int64_t>(cfg.offload_chunk_mb * (1 << 20) / 4)};
  try {
    size_model_states(plan, policy, sharding, offload);
  } catch (const SizeOverflow&) {
    fail_plan_overflow(cfg, spec);
  }
}

RunLayout lay_out_run(const TrainConfig& cfg, const ParallelRank& place, const DeviceTarget& device,
                      int64_t comm_buffer_bytes) {
  RunLayout run = lay_out_graph(cfg, place, device);
  plan_model_states(run.plan, cfg, run.spec, place, comm_buffer_bytes,
                    adam_mini_block_count(run.mini_blocks));
  return run;
}

TrainConfig graph_settings(const TrainConfig& cfg, const ParallelRank& place) {
  TrainConfig graph = cfg;
  PrecisionConfig& p = graph.precision;
  const PrecisionConfig defaults;
  // The graph's tensors read the moments only for the update in the backward's carries (their quantization
  // block), and the gradients' dtype only where the schedule holds gradient tensors.
  const bool blocked = p.exp_avg == MomentDType::int8 || p.exp_avg == MomentDType::fp8;
  if (!cfg.optimizer_in_backward || !blocked) p.set_moments(defaults.exp_avg);
  if (!cfg.optimizer_in_backward && !(place.dp > 1 && cfg.zero_stage >= 2))
    p.o2_gradient = defaults.o2_gradient;
  p.master_weights = defaults.master_weights;
  p.o2_stochastic_rounding = defaults.o2_stochastic_rounding;
  graph.optimizer = TrainConfig{}.optimizer;
  return graph;
}

}  // namespace mt
