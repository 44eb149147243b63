// Everything a training run holds, derived from its configuration alone: the model's graph, whose table also
// gets the loaders' token windows, the checkpoint buffer and the ZeRO windows' buffers, and the one Plan.
// The trainer allocates exactly this plan; `memtrain estimate` prints it, for any model size, without
// allocating anything.
#pragma once

#include <cstdint>

#include "config/train_config.h"
#include "data/loader.h"
#include "devices/devices.h"
#include "memory/plan.h"
#include "model/adam_mini_blocks.h"
#include "model/model.h"
#include "model/zero_schedule.h"
#include "parallel/parallel_groups.h"

namespace mt {

struct RunLayout {
  ModelSpec spec;
  int64_t seq_len = 0;  // T
  int64_t accum = 1;    // micro-batches per optimizer step, per rank
  ModelGraph model;
  LoaderConfig train_data, val_data;
  int train_window = -1, val_window = -1;  // the loaders' token windows (val: -1 without evaluation)
  int checkpoint_stream = -1;              // -1 when the run neither saves nor loads checkpoints
  ZeroSchedule zero;
  BackwardUpdates backward_updates;     // --optimizer-in-backward: each block's gradients, else empty
  std::vector<MiniBlocks> mini_blocks;  // Adam-mini's partition (--optimizer adam-mini), else empty
  Plan plan;
};

// The plan of the rank at `place` (its data-, tensor- and pipeline-parallel ranks) on `device` (its traits:
// the kernels' workspace, the alignment), with communicators holding `comm_buffer_bytes` of their own.
// Checks the flags first (mt::Error on bad input: a model deeper than planning takes, or byte counts beyond
// 64 bits, are usage errors too); reads no data.
RunLayout lay_out_run(const TrainConfig& config, const ParallelRank& place, const DeviceTarget& device,
                      int64_t comm_buffer_bytes);

// lay_out_run in its parts, for a search that plans many configurations of one graph
// (forecast/graph_cache.h). The checks of `config` lay_out_run makes before planning (usage errors), and the
// model they resolve.
ModelSpec check_layout(const TrainConfig& config, const ParallelRank& place);
// check_layout, then the graph, its table and the plan of its tensors (plan_tensors: no model states; with
// `cache`, sizes only).
RunLayout lay_out_graph(const TrainConfig& config, const ParallelRank& place, const DeviceTarget& device,
                        ArenaPackCache* cache = nullptr);
// The model states of `config` sized on `plan` (size_model_states), with `v_blocks` Adam-mini blocks (0 for
// AdamW): lay_out_graph's plan becomes lay_out_run's.
void plan_model_states(Plan& plan, const TrainConfig& config, const ModelSpec& spec,
                       const ParallelRank& place, int64_t comm_buffer_bytes, int64_t v_blocks);
// `config` with the settings the graph does not read at their defaults: the moments' dtype (but the update in
// the backward's 8-bit quantization block), master weights, the gradients' dtype where no gradient tensor
// of the graph holds it, stochastic rounding, the optimizer. Configurations with equal graph_settings have
// the same graph, table and tensors' plan.
TrainConfig graph_settings(const TrainConfig& config, const ParallelRank& place);

}  // namespace mt
