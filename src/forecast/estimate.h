// `memtrain estimate`: what each rank of a run would hold, per category, from the same plan the trainer
// allocates (train/run_layout.h), without allocating the model. Also where in the step the most bytes are
// live, and whether the rank fits a device's memory.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backend/cpu/cpu_isa.h"
#include "forecast/formulas.h"
#include "forecast/model_parallel.h"
#include "memory/category.h"
#include "memory/plan.h"
#include "model/graph.h"
#include "model/spec.h"
#include "train/train_config.h"

namespace mt {

// The op of the step during which a rank holds the most bytes: its fixed buffers (model states, loaders,
// communicator) plus the arena tensors bound while the op runs, at their packed (aligned) sizes, as the
// trainer's --memory-timeline records them.
struct OpPeak {
  int op = -1;
  std::string name;
  std::string phase;  // forward, loss (the LM head with its gradient) or backward
  CategoryBytes live;
};

OpPeak peak_op(const Graph& graph, const Plan& plan);

struct RankEstimate {
  int rank = 0;                            // data-parallel rank
  int stage = 0;                           // pipeline stage (modelled)
  int64_t in_flight = 1;                   // 1F1B micro-batches whose activations the stage holds (modelled)
  int64_t saved_per_micro_batch = 0;       // the activation bytes each of them keeps (modelled)
  CategoryBytes bytes;                     // what the rank allocates, per category
  int64_t num_params = 0;                  // parameter elements of the model states (vocabulary padded)
  int64_t shard_begin = 0, shard_end = 0;  // the flat range of this rank's optimizer shard
  int64_t shard_elems = 0;                 // S = ceil(N / dp) when sharded (the last shard padded), else N
  int64_t activations_packed = 0;          // one micro-batch's activation arena
  int64_t activations_unpacked = 0;        // the activation tensors' bytes without lifetime packing
  int64_t offloaded_bytes = 0;             // master weights and moments in the offload file: disk, not memory
  OpPeak peak;
};

struct Estimate {
  ModelSpec spec;
  TrainConfig config;
  int64_t padded_params = 0;     // the whole model's parameter elements, vocabulary padded
  int64_t trainable_params = 0;  // those of the model states; fewer under LoRA, whose base is frozen
  int64_t seq_len = 0;
  int64_t accum = 1;  // micro-batches per optimizer step and rank
  int dp = 1;
  ModelParallel mp;  // tp: run by the engine, each rank's plan; pp > 1: both modelled, not run
  int threads = 1;   // OpenMP threads per rank, which size the kernels' scratch
  kernels::CpuIsa isa = kernels::CpuIsa::generic;  // the ISA level the kernels run at (bf16's product tiles)
  ModelStatePolicy policy;
  std::vector<RankEstimate> ranks;
  std::optional<int64_t> device_memory;

  bool modelled() const { return mp.pp > 1; }
  const RankEstimate& largest() const;  // the rank holding the most
};

// The plan of every rank of `dp` data-parallel x mp.tp tensor-parallel ranks (world rank dp_rank x tp +
// tp_rank, an MPI run when more than one), as `memtrain train` would make it with the same configuration;
// with pipeline parallelism, every stage of one tensor-parallel rank of each data-parallel rank, modelled
// (forecast/model_parallel.h). Kernels at ISA level `isa`. Reads no data, writes no file.
Estimate estimate_run(const TrainConfig& config, int dp, const ModelParallel& mp,
                      std::optional<int64_t> device_memory, kernels::CpuIsa isa);

// The largest rank's model states, for comparing with the published formulas (forecast/formulas.h).
ModelStateLayout model_state_layout(const Estimate& estimate);

std::string format_estimate(const Estimate& estimate);
nlohmann::ordered_json estimate_json(const Estimate& estimate);

}  // namespace mt
