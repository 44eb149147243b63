#include "train/run_layout.h"

#include <algorithm>

#include "memory/precision.h"
#include "train/train_flags.h"

namespace mt {

RunLayout lay_out_run(const TrainConfig& cfg, int world, int rank, int threads, int64_t comm_buffer_bytes,
                      kernels::CpuIsa isa) {
  RunLayout run;
  run.spec = resolve_model(cfg.model, cfg.pad_vocab_multiple);
  run.seq_len = cfg.seq_len != 0 ? cfg.seq_len : run.spec.n_positions;
  check_flags(cfg, run.spec, run.seq_len);
  run.accum = accumulation_steps(cfg, world);
  const int64_t B = cfg.micro_batch, T = run.seq_len;

  const ModelStatePolicy policy = model_state_policy(cfg.precision);
  run.model = build_model_graph(run.spec, {.batch = B,
                                           .seq_len = T,
                                           .threads = threads,
                                           .dtype = policy.weights,
                                           .isa = isa,
                                           .recompute = cfg.recompute});
  const int32_t vocab = static_cast<int32_t>(run.spec.vocab_size);
  run.train_data = {B, T, cfg.shuffle, cfg.seed, vocab};
  run.val_data = {B, T, false, cfg.seed, vocab};
  TensorTable& table = run.model.graph.table;
  run.train_window = table.add({"loader.train.window", {Loader::window_tokens(run.train_data)}, DType::u16});
  if (cfg.eval_interval > 0)
    run.val_window = table.add({"loader.val.window", {Loader::window_tokens(run.val_data)}, DType::u16});
  // Checkpoints stream tensors straight from the model states; reading files back to checksum them goes
  // through this buffer, at most one tensor (and 1 MiB) in size.
  if (!cfg.save.empty() || !cfg.load.empty() || cfg.resume != ResumeMode::off || cfg.verify_resume > 0) {
    int64_t largest = 1;
    for (int id : run.model.params) largest = std::max(largest, table[id].numel());
    run.checkpoint_stream =
        table.add({"checkpoint.stream", {std::min<int64_t>(largest, 1 << 18)}, DType::f32});
  }
  run.zero = add_zero_schedule(run.model.graph, world > 1 ? cfg.zero_stage : 0, policy.grads);
  const Sharding sharding{.world = world,
                          .rank = rank,
                          .stage = cfg.zero_stage,
                          .bucket_elems = static_cast<int64_t>(cfg.bucket_size_mb * (1 << 20) / 4),
                          .comm_internal_bytes = comm_buffer_bytes};
  const OptimizerOffload offload{
      .enabled = cfg.offload_optimizer == OffloadOptimizer::nvme,
      .path = cfg.offload_path,
      .chunk_elems = std::max<int64_t>(1, static_cast<int64_t>(cfg.offload_chunk_mb * (1 << 20) / 4))};
  run.plan = make_plan(table, policy, sharding, offload);
  return run;
}

}  // namespace mt
