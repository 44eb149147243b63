// `memtrain plan`: the search over the ways to run one model on `ranks` ranks (data parallel, and the
// tensor- and pipeline-parallel sizes that divide them) in
// `device_memory` bytes per rank: precision, O2 flags and 8-bit moments, ZeRO stage, recompute, micro-batch
// (the global batch fixed, accumulation making up the rest) and optimizer offload, on the base's --device.
// Every candidate's memory is lay_out_run's, exactly the trainer's; what check_config refuses (on a GPU:
// what its backend does not run yet) is not tried, what does not fit is dropped and the rest ranked by the
// cost model.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "devices/devices.h"
#include "forecast/cost_model.h"
#include "forecast/graph_cache.h"
#include "forecast/hardware_profile.h"

namespace mt {

struct SearchRequest {
  TrainConfig base;  // model, seq_len, global batch, threads, data and train_iters for the command line
  int ranks = 1;
  int64_t device_memory = 0;  // bytes per rank: a GPU's, the card's memory
  // A GPU's: the CUDA runtime's own device memory beside every plan (GpuProfile::runtime_overhead_bytes).
  int64_t runtime_overhead = 0;
  HardwareProfile profile;
  CpuIsa isa = process_cpu_isa();  // every candidate's kernels run at this level
  // Called after each configuration is planned, with the count so far: a long search's progress (one call
  // at a time, from whichever thread planned it).
  std::function<void(int64_t planned)> on_planned = {};
  // Beside AdamW's ordinary step, Adam-mini and the update in the backward where they run; a base that names
  // either keeps it. False: AdamW's step only.
  bool other_optimizers = true;
  // Threads that plan configurations at once, each laying out one graph at a time; 0: the cores, up to 8,
  // as many as the memory free holds graphs of this model. Any count lists the same configurations.
  int search_threads = 0;

  // What a candidate's device bytes may take: the device's memory less the runtime's overhead.
  int64_t room() const { return device_memory - runtime_overhead; }
};

struct ConfigCandidate {
  TrainConfig config;
  int64_t rank_bytes = 0;  // lay_out_run's total on the rank that holds the most: every rank fits in it
  CategoryBytes bytes;     // that rank's
  // What the device's own memory gives that rank: all of rank_bytes on the CPU; on a GPU what it commits for
  // the buffers in its memory (committed_device_bytes; the host part is pinned host memory), as
  // Estimate::device_need counts it. A candidate fits when this fits SearchRequest::room.
  int64_t device_bytes = 0;
  StepCost cost;  // the slowest pipeline stage's (the only one without pipeline parallelism)
};

struct SearchResult {
  std::vector<ConfigCandidate> fitting;  // fastest first by the cost model
  int64_t candidates_planned = 0;        // lay_out_run calls the search made
  // Groups of configurations (a precision, ZeRO stage, offload and optimizer, every micro-batch and
  // recompute) not planned: this much of the model states alone is more than the device holds.
  int64_t groups_skipped = 0;
  // The distinct graphs among them, each laid out once (GraphCache), and of those graphs' arenas (4 each)
  // the ones packed: the rest recurred and were reused.
  int64_t graphs_laid_out = 0;
  int64_t arenas_packed = 0;
  std::vector<std::string> notes;  // where the ranking agrees or disagrees with the usual advice
};

SearchResult search_configs(const SearchRequest& request);

RecomputeConfig full_recompute(RecomputeMethod method, int64_t layers);

// Bytes that every candidate of `config` holds on its largest rank at least: that rank's share of the
// weights and, unless offloaded, of the master weights and moments, per element of the model's `params` (no
// scales, no Adam-mini v, no gradients, no activations); 0 under LoRA, whose frozen base is stored otherwise.
// A search skips what this alone puts over the device, without planning it.
double model_states_floor(const TrainConfig& config, int64_t params, int ranks);

// The fewest layers of full block recompute with which `config` fits, or 0 when not even all n_layer do.
// Memory falls as layers are added, so by bisection.
int64_t fewest_block_layers(TrainConfig config, int64_t n_layer,
                            const std::function<bool(const TrainConfig&)>& fits);

// Plans one configuration on `ranks` ranks, each pipeline stage's largest rank, with the thread count the
// trainer would use, at ISA level `isa`: lay_out_run and predict_step_cost on `profile`.
ConfigCandidate evaluate_candidate(const TrainConfig& config, int ranks, const HardwareProfile& profile,
                                   CpuIsa isa);
// The same through `graphs` (its profile), which lays out each distinct graph once: the same bytes.
ConfigCandidate evaluate_candidate(const TrainConfig& config, int ranks, CpuIsa isa, GraphCache& graphs);

// The flags of `config` that differ from training's defaults: precision, O2, ZeRO, recompute, batch,
// offload, threads (with `mpirun -np N` in front for N ranks).
std::string train_command_line(const TrainConfig& config, int ranks);

// "bf16 + O2 optimizer, ZeRO 1, full recompute (block 6), micro-batch 2 x 4": the candidate in a few words.
std::string describe_config(const TrainConfig& config);

}  // namespace mt
