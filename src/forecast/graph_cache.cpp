#include "forecast/graph_cache.h"

#include <stdexcept>

#include "config/run_flag_table.h"
#include "model/adam_mini_blocks.h"

namespace mt {

std::string GraphCache::key(const TrainConfig& config, const ParallelRank& place,
                            const DeviceTarget& device) {
  const TrainConfig settings = graph_settings(config, place);
  std::string key;
  for (const RunFlag& flag : run_flag_table()) {
    key += flag.name();
    key += '=';
    key += flag_args(settings, flag.name());
    key += '\n';
  }
  for (int value : {place.tp, place.dp, place.pp, place.tp_rank, place.dp_rank, place.pp_rank,
                    static_cast<int>(place.tied_embedding), static_cast<int>(device.kind),
                    static_cast<int>(device.cpu_isa), device.threads, device.gpu}) {
    key += std::to_string(value);
    key += ' ';
  }
  return key;
}

GraphCache::Graph GraphCache::lay_out(const TrainConfig& settings, const ParallelRank& place,
                                      const DeviceTarget& device) {
  RunLayout run = lay_out_graph(settings, place, device, &arenas_);
  // Every configuration of the graph holds the same tensors on their own: their commitment is the graph's.
  const CategoryBytes own =
      device.kind == DeviceKind::cuda
          ? committed_bytes(tensor_buffers(run.model.graph.table), run.plan.commit_granularity)
          : CategoryBytes{};
  Graph g{.spec = run.spec,
          .tensors = std::move(run.plan),
          .ops = sum_op_costs(run.model.graph, run.spec, profile_, settings.tensor_parallel),
          .shape = run_shape(run),
          .adam_mini_blocks = {},
          .own_committed = own};
  // Adam-mini's partition is of a whole model's tensors, and runs without LoRA (check_layout refuses the
  // rest).
  if (settings.tensor_parallel == 1 && settings.pipeline_parallel == 1 && !settings.lora.enabled())
    g.adam_mini_blocks = adam_mini_block_count(run.spec, run.model.graph.table, run.model.params);
  return g;
}

const GraphCache::Graph& GraphCache::graph(const TrainConfig& config, const ParallelRank& place,
                                           const DeviceTarget& device) {
  const std::string key = GraphCache::key(config, place, device);
  std::promise<std::shared_ptr<const Graph>> laying_out;
  std::shared_future<std::shared_ptr<const Graph>> graph;
  bool first = false;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto found = graphs_.try_emplace(key);
    first = found.second;
    if (first) found.first->second = laying_out.get_future().share();
    graph = found.first->second;
  }
  // The map keeps the graph; get() rethrows its layout's error.
  if (!first) return *graph.get();
  try {
    laying_out.set_value(
        std::make_shared<const Graph>(lay_out(graph_settings(config, place), place, device)));
  } catch (...) {
    laying_out.set_exception(std::current_exception());
  }
  return *graph.get();
}

int64_t GraphCache::graphs() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(graphs_.size());
}

GraphCache::Planned GraphCache::plan(const TrainConfig& config, const ParallelRank& place,
                                     const DeviceTarget& device, int64_t comm_buffer_bytes,
                                     int data_parallel) {
  check_layout(config, place);
  const Graph& g = graph(config, place, device);
  Planned planned{.plan = g.tensors, .cost = {}, .committed = {}};
  const bool mini = config.optimizer == OptimizerKind::adam_mini;
  if (mini && !g.adam_mini_blocks)
    throw std::logic_error("graph cache: Adam-mini planned on a graph without its partition");
  const int64_t v_blocks = mini ? *g.adam_mini_blocks : 0;
  plan_model_states(planned.plan, config, g.spec, place, comm_buffer_bytes, v_blocks);
  planned.cost = step_cost(g.ops, g.shape, planned.plan, config, data_parallel, profile_);
  if (device.kind == DeviceKind::cuda) {
    planned.committed = committed_bytes(plan_buffers(planned.plan), planned.plan.commit_granularity);
    for (Category c : kAllCategories) planned.committed[c] += g.own_committed[c];
  }
  return planned;
}

}  // namespace mt
