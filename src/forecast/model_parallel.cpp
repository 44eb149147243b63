#include "forecast/model_parallel.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/int_math.h"
#include "model/zero_schedule.h"

namespace mt {

namespace {

// The stage of each op: the embedding's ops on the first stage, a layer's on its stage, the final norm,
// head and loss on the last; ops without weights go with the op before them.
std::vector<int> op_stages(const Graph& graph, int64_t n_layer, int pp) {
  const int last_block = static_cast<int>(n_layer) + 1;  // blocks: embedding 0, layers 1..L, final L+1
  std::vector<int> stage(graph.ops.size(), 0);
  int current = 0;
  for (size_t i = 0; i < graph.ops.size(); ++i) {
    const Op& op = graph.ops[i];
    if (static_cast<int>(i) == graph.loss_op) {
      current = pp - 1;
    } else if (const int block = param_block(graph.table, op); block >= 0) {
      if (block == 0)
        current = 0;
      else if (block >= last_block)
        current = pp - 1;
      else
        current = static_cast<int>((block - 1) * pp / n_layer);
    }
    stage[i] = current;
  }
  return stage;
}

// The ops of one stage over copies of the tensors they use, plus the fixed buffers no op names (the loaders'
// windows, the checkpoint buffer), with lifetimes read off the stage's own ops.
Graph stage_graph(const Graph& full, const std::vector<int>& stage_of_op, int stage) {
  Graph g;
  g.threads = full.threads;
  std::vector<int> id_map(full.table.size(), -1);
  auto copy = [&](int id) {
    if (id < 0) return -1;
    if (id_map[id] < 0) {
      TensorDesc t = full.table[id];
      t.first_op = t.last_op = -1;
      id_map[id] = g.table.add(t);
    }
    return id_map[id];
  };
  g.loss_op = -1;
  for (size_t i = 0; i < full.ops.size(); ++i) {
    if (stage_of_op[i] != stage) continue;
    Op op = full.ops[i];
    op.remap_operands(copy);
    if (static_cast<int>(i) <= full.loss_op) g.loss_op = static_cast<int>(g.ops.size());
    g.ops.push_back(op);
  }
  for (int id = 0; id < full.table.size(); ++id) {
    const TensorDesc& t = full.table[id];
    if (t.category == Category::other && !t.has_lifetime()) copy(id);
  }
  assign_lifetimes(g);
  return g;
}

// Activation bytes live from the stage's last forward op into its backward: what one micro-batch keeps.
int64_t saved_across_backward(const Graph& g) {
  int64_t saved = 0;
  for (const TensorDesc& t : g.table.tensors())
    if (t.category == Category::activations && t.has_lifetime() && t.first_op <= g.loss_op &&
        t.last_op > g.loss_op)
      saved = checked_add(saved, arena_aligned(t.bytes()));
  return saved;
}

}  // namespace

std::vector<StageLayout> plan_pipeline_stages(const RunLayout& run, int pp) {
  const ModelSpec& spec = run.spec;
  if (pp > spec.n_layer)
    fail_usage("--pp " + std::to_string(pp) + " exceeds the model's " + std::to_string(spec.n_layer) +
               " layers");
  // The stages hold no frozen weights.
  if (run.model.graph.table.numel(Category::frozen) > 0)
    fail_usage("--pp with --lora-rank: the modelled pipeline stages do not hold LoRA's frozen base yet");
  const Graph& full = run.model.graph;
  const std::vector<int> stage_of_op = op_stages(full, spec.n_layer, pp);
  std::vector<StageLayout> stages;
  for (int s = 0; s < pp; ++s) {
    StageLayout sp;
    sp.stage = s;
    sp.graph = stage_graph(full, stage_of_op, s);
    const Sharding& sharding = run.plan.sharding;
    add_zero_schedule(sp.graph, sharding.world > 1 ? sharding.stage : 0, run.plan.policy.grads);
    sp.plan = make_plan(sp.graph.table, run.plan.policy, sharding, run.plan.offload);
    sp.in_flight = std::min<int64_t>(pp - s, run.accum);
    sp.saved_per_micro_batch = saved_across_backward(sp.graph);
    int64_t& activations = sp.plan.bytes[Category::activations];
    activations = checked_add(activations, checked_mul(sp.in_flight - 1, sp.saved_per_micro_batch));
    sp.plan.bytes.total();  // the stage's total fits as well
    stages.push_back(std::move(sp));
  }
  return stages;
}

}  // namespace mt
