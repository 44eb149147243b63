#include "forecast/model_parallel.h"

#include <algorithm>
#include <string>
#include <unordered_set>

#include "core/error.h"
#include "core/int_math.h"
#include "model/zero_schedule.h"

namespace mt {

namespace {

// A tensor's name without its layer prefix ("h.3.", "model.layers.3.") and its recompute suffix.
std::string role(const std::string& name) {
  std::string r = name;
  for (const std::string prefix : {"h.", "model.layers."})
    if (r.starts_with(prefix)) {
      const size_t dot = r.find('.', prefix.size());
      if (dot != std::string::npos) r = r.substr(dot + 1);
    }
  const size_t recomputed = r.find(".recomputed");
  if (recomputed != std::string::npos) r.erase(recomputed, std::string(".recomputed").size());
  if (r.ends_with(".grad")) r.erase(r.size() - 5);
  return r;
}

const std::unordered_set<std::string>& split_roles() {
  static const std::unordered_set<std::string> roles = {
      // column-parallel weights and biases, row-parallel weights (their biases are replicated)
      "attn.c_attn.weight", "attn.c_attn.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "attn.c_proj.weight",
      "mlp.c_proj.weight", "self_attn.qkv_proj.weight", "self_attn.qkv_proj.bias", "mlp.gate_up_proj.weight",
      "self_attn.o_proj.weight", "mlp.down_proj.weight",
      // vocabulary-parallel embedding, head and logits
      "wte.weight", "model.embed_tokens.weight", "lm_head.weight", "lm_head.logits",
      // activations between a column- and a row-parallel product
      "attn.qkv", "attn.out", "attn.lse", "mlp.fc", "mlp.gelu.out", "self_attn.qkv", "self_attn.out",
      "self_attn.lse", "mlp.gate_up", "mlp.swiglu.out"};
  return roles;
}

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

// The ops of one stage over copies of the tensors they use (split ones at 1/tp), plus the fixed buffers no
// op names (the loaders' windows, the checkpoint buffer), with lifetimes read off the stage's own ops.
Graph stage_graph(const Graph& full, const std::vector<int>& stage_of_op, int stage, int tp) {
  Graph g;
  g.threads = full.threads;
  std::vector<int> id_map(full.table.size(), -1);
  auto copy = [&](int id) {
    if (id < 0) return -1;
    if (id_map[id] < 0) {
      TensorDesc t = full.table[id];
      t.first_op = t.last_op = -1;
      if (tp > 1 && split_by_tensor_parallel(t)) t.shape = {(t.numel() + tp - 1) / tp};
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

bool split_by_tensor_parallel(const TensorDesc& tensor) {
  return split_roles().contains(role(tensor.name));
}

std::vector<StageLayout> plan_model_parallel(const RunLayout& run, const ModelParallel& mp) {
  const ModelSpec& spec = run.spec;
  if (spec.n_head % mp.tp != 0 || spec.n_kv_head % mp.tp != 0)
    fail_usage("--tp " + std::to_string(mp.tp) + " must divide the model's " + std::to_string(spec.n_head) +
               " attention heads and " + std::to_string(spec.n_kv_head) + " key/value heads");
  if (mp.pp > spec.n_layer)
    fail_usage("--pp " + std::to_string(mp.pp) + " exceeds the model's " + std::to_string(spec.n_layer) +
               " layers");
  // The split roles above know no adapters, and the stages no frozen weights.
  if (run.model.graph.table.numel(Category::frozen) > 0)
    fail_usage("--tp and --pp with --lora-rank: the model-parallel model does not split LoRA adapters yet");
  const Graph& full = run.model.graph;
  const std::vector<int> stage_of_op = op_stages(full, spec.n_layer, mp.pp);
  std::vector<StageLayout> stages;
  for (int s = 0; s < mp.pp; ++s) {
    StageLayout sp;
    sp.stage = s;
    sp.graph = stage_graph(full, stage_of_op, s, mp.tp);
    const Sharding& sharding = run.plan.sharding;
    add_zero_schedule(sp.graph, sharding.world > 1 ? sharding.stage : 0, run.plan.policy.grads);
    sp.plan = make_plan(sp.graph.table, run.plan.policy, sharding, run.plan.offload);
    sp.in_flight = std::min<int64_t>(mp.pp - s, run.accum);
    sp.saved_per_micro_batch = saved_across_backward(sp.graph);
    int64_t& activations = sp.plan.bytes[Category::activations];
    activations = checked_add(activations, checked_mul(sp.in_flight - 1, sp.saved_per_micro_batch));
    sp.plan.bytes.total();  // the stage's total fits as well
    stages.push_back(std::move(sp));
  }
  return stages;
}

}  // namespace mt
