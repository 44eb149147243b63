// What a configuration search keeps of each distinct graph it plans. The configurations it tries differ in
// a few settings, most of them only in the model states (the moments' dtype, master weights, the gradients'
// dtype, the optimizer), not in the step's graph. A deep model's graph holds every layer's tensors and ops
// (about 15 KB a layer) and takes most of a second to lay out, so each distinct graph (graph_settings) is
// laid out once and what a configuration's plan and cost read of it is kept, not the graph: the plan of its
// tensors (plan_tensors' bytes and arena sizes), its ops' costs summed over one pass, the run's shape and
// Adam-mini's block count. A configuration's plan is then size_model_states over that, and its cost
// step_cost: the functions lay_out_run and predict_step_cost end with, so the bytes are theirs exactly.
// Threads may plan at once: each graph is laid out by the first that needs it.
#pragma once

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "config/train_config.h"
#include "forecast/cost_model.h"
#include "forecast/hardware_profile.h"
#include "layout/run_layout.h"
#include "memory/arena_pack_cache.h"

namespace mt {

class GraphCache {
 public:
  // Every configuration is priced on `profile`.
  explicit GraphCache(HardwareProfile profile) : profile_(std::move(profile)) {}

  struct Graph {
    ModelSpec spec;
    Plan tensors;                             // plan_tensors' result, without the per-tensor offsets
    StepCost ops;                             // sum_op_costs: one pass of the graph
    RunShape shape;                           // run_shape
    std::optional<int64_t> adam_mini_blocks;  // Adam-mini's v blocks, where it runs (one whole model)
    // On a GPU, what it commits for the tensors held on their own (tensor_buffers): the table's alone, the
    // same for every configuration of the graph.
    CategoryBytes own_committed;
  };

  // lay_out_run's plan of `config` on the rank at `place`, and predict_step_cost's cost over
  // `data_parallel` ranks; its graph laid out unless planned before. Usage errors as lay_out_run's.
  struct Planned {
    Plan plan;
    StepCost cost;
    CategoryBytes committed;  // on a GPU, committed_device_bytes of the plan: what its free memory drops by
  };
  Planned plan(const TrainConfig& config, const ParallelRank& place, const DeviceTarget& device,
               int64_t comm_buffer_bytes, int data_parallel);

  // Equal for two configurations of one graph: graph_settings' flags, the rank's place and the device.
  static std::string key(const TrainConfig& config, const ParallelRank& place, const DeviceTarget& device);

  int64_t graphs() const;  // laid out
  int64_t arenas_packed() const { return arenas_.packed(); }

 private:
  // The graph of `config`; a thread asking for one another is laying out waits for it.
  const Graph& graph(const TrainConfig& config, const ParallelRank& place, const DeviceTarget& device);
  Graph lay_out(const TrainConfig& settings, const ParallelRank& place, const DeviceTarget& device);

  HardwareProfile profile_;
  ArenaPackCache arenas_;  // graphs of equal tensors share their arenas
  mutable std::mutex mutex_;
  // By key: the graph, or its layout under way.
  std::map<std::string, std::shared_future<std::shared_ptr<const Graph>>> graphs_;
};

}  // namespace mt
