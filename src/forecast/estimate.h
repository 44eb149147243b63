// `memtrain estimate`: what each rank of a run would hold, per category, from the same plan the trainer
// allocates (layout/run_layout.h), without allocating the model. Also where in the step the most bytes are
// live, and whether the rank fits a device's memory.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "core/cpu_isa.h"
#include "forecast/formulas.h"
#include "forecast/gpu_profile.h"
#include "memory/category.h"
#include "memory/plan.h"
#include "model/graph.h"
#include "model/spec.h"
#include "parallel/parallel_groups.h"

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
  int64_t device_bytes() const { return bytes.total() - host_bytes.total(); }  // not in host memory

  int rank = 0;        // world rank
  ParallelRank place;  // its pipeline stage, data- and tensor-parallel ranks
  // 1F1B: the micro-batches whose activations the rank holds at once (1 without pipeline parallelism), and
  // the activation bytes the first one keeps from its forward into its backward, read off the rank's graph.
  int64_t in_flight = 1;
  int64_t saved_per_micro_batch = 0;
  CategoryBytes bytes;       // what the rank allocates, per category
  CategoryBytes host_bytes;  // the part of bytes in host memory (Plan::host)
  // What the device commits for the buffers in its own memory, each rounded to its granularity
  // (committed_device_bytes): on a GPU, what its free memory drops by.
  CategoryBytes committed;
  // On a GPU, every buffer of the plan (planned_buffers), which `committed` sums rounded; empty on the CPU.
  std::vector<PlannedBuffer> buffers;
  int64_t num_params = 0;                  // parameter elements of the model states (vocabulary padded)
  int64_t shard_begin = 0, shard_end = 0;  // the flat range of this rank's optimizer shard
  int64_t shard_elems = 0;                 // S = ceil(N / dp) when sharded (the last shard padded), else N
  int64_t activations_packed = 0;          // one micro-batch's activation arena
  int64_t activations_unpacked = 0;        // the activation tensors' bytes without lifetime packing
  int64_t offloaded_bytes = 0;             // master weights and moments in the offload file: disk, not memory
  OpPeak peak;
  // --optimizer-in-backward: the gradient arena's tensors (a block's gradients, or a quantization block's
  // carry), in the order the backward starts them.
  struct GradientTensor {
    std::string name;
    int64_t bytes = 0, offset = 0;
    int first_op = 0, last_op = 0;
    std::string first_name, last_name;  // of the ops
  };
  std::vector<GradientTensor> gradient_tensors;
};

struct Estimate {
  ModelSpec spec;
  TrainConfig config;
  int64_t padded_params = 0;     // the whole model's parameter elements, vocabulary padded
  int64_t trainable_params = 0;  // those of the model states; fewer under LoRA, whose base is frozen
  int64_t seq_len = 0;
  int64_t accum = 1;  // micro-batches per optimizer step and rank (every stage runs them all)
  int dp = 1;         // data-parallel ranks; config's tensor_parallel and pipeline_parallel the rest
  int threads = 1;    // OpenMP threads per rank, which size the kernels' scratch
  CpuIsa isa = CpuIsa::generic;    // the ISA level the kernels run at (bf16's product tiles)
  bool on_gpu = false;             // --device cuda: the plan is the GPU's, its host part pinned host memory
  int64_t commit_granularity = 0;  // the device's (Plan::commit_granularity)
  // --gpu: the card whose memory the plan, with the runtime's own overhead, must fit.
  std::optional<GpuProfile> gpu;
  ModelStatePolicy policy;
  std::vector<RankEstimate> ranks;
  std::optional<int64_t> device_memory;

  int world() const { return dp * config.tensor_parallel * config.pipeline_parallel; }
  // What a rank needs of its device's memory: on a GPU what it commits for the device buffers (not the host
  // part) and the runtime's overhead (0 without a profile); on the CPU all of it.
  int64_t device_need(const RankEstimate& rank) const;
  const RankEstimate& largest() const;  // the rank holding the most
};

// The plan of every rank of `dp` data-parallel ranks x config.tensor_parallel x config.pipeline_parallel
// (parallel/parallel_groups.h: world rank = (stage x dp + data-parallel rank) x tp + tensor-parallel rank, an
// MPI run when more than one), each from lay_out_run as `memtrain train` makes it with the same
// configuration. Kernels at ISA level `isa`; for --device cuda the GPU's plan, fitted into `gpu`'s memory
// with its runtime overhead when a profile is given (then device_memory, when given, overrides the card's
// memory). Reads no data, writes no file.
Estimate estimate_run(const TrainConfig& config, int dp, std::optional<int64_t> device_memory, CpuIsa isa,
                      const GpuProfile* gpu = nullptr);

// The largest rank's model states, for comparing with the published formulas (forecast/formulas.h).
ModelStateLayout model_state_layout(const Estimate& estimate);

std::string format_estimate(const Estimate& estimate);
// --estimate --explain under --optimizer-in-backward: each gradient tensor of the rank with its lifetime and
// place in the gradient arena; "" without the mode.
std::string format_gradient_lifetimes(const RankEstimate& rank);
nlohmann::ordered_json estimate_json(const Estimate& estimate);

}  // namespace mt
