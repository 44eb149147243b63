#include "model/zero_schedule.h"

#include <map>
#include <stdexcept>
#include <string>

#include "core/int_math.h"

namespace mt {

namespace {

// The kinds whose ops add into parameter gradients.
bool writes_gradients(OpKind kind) {
  return kind == OpKind::lm_head_loss || kind == OpKind::layernorm_backward ||
         kind == OpKind::rmsnorm_backward || kind == OpKind::linear_backward ||
         kind == OpKind::embedding_backward || kind == OpKind::lora_backward;
}

// Every block's parameters in table order, which is their order in the flat buffers; a block whose
// parameters are interleaved with another's could not be gathered as one range.
std::map<int, std::vector<int>> params_by_block(const TensorTable& table) {
  std::map<int, std::vector<int>> blocks;
  int previous = -1;
  for (int id = 0; id < table.size(); ++id) {
    const TensorDesc& t = table[id];
    if (t.category != Category::params) continue;
    if (t.block < 0) throw std::logic_error("zero schedule: parameter " + t.name + " has no block");
    if (t.block != previous && blocks.contains(t.block))
      throw std::logic_error("zero schedule: block " + std::to_string(t.block) + " is not contiguous");
    blocks[t.block].push_back(id);
    previous = t.block;
  }
  return blocks;
}

int64_t block_numel(const TensorTable& table, const std::vector<int>& params) {
  int64_t n = 0;
  for (int id : params) n = checked_add(n, table[id].numel());
  return n;
}

}  // namespace

ZeroSchedule add_zero_schedule(Graph& graph, int stage, DType grads) {
  ZeroSchedule schedule;
  schedule.stage = stage;
  schedule.window_of_op.assign(graph.ops.size(), -1);
  TensorTable& table = graph.table;
  const std::map<int, std::vector<int>> blocks = params_by_block(table);
  std::vector<BlockWindow>& windows = schedule.windows;
  for (int i = 0; i < static_cast<int>(graph.ops.size()); ++i) {
    const int block = param_block(table, graph.ops[i]);
    if (block < 0) continue;
    if (windows.empty() || windows.back().block != block)
      windows.push_back({.block = block, .first_op = i, .last_op = i, .params = blocks.at(block)});
    windows.back().last_op = i;
    if (writes_gradients(graph.ops[i].kind())) windows.back().writes_grads = true;
    schedule.window_of_op[i] = static_cast<int>(windows.size()) - 1;
  }
  std::map<int, int> last_grads;  // block -> its last window that writes gradients
  for (int w = 0; w < static_cast<int>(windows.size()); ++w)
    if (windows[w].writes_grads) last_grads[windows[w].block] = w;
  for (const auto& [block, w] : last_grads) windows[w].last_grads_of_block = true;
  if (stage < 2) return schedule;

  const int last_op = static_cast<int>(graph.ops.size()) - 1;
  for (size_t w = 0; w < windows.size(); ++w) {
    BlockWindow& window = windows[w];
    const int64_t n = block_numel(table, window.params);
    const std::string name = "zero.block" + std::to_string(window.block) + ".window" + std::to_string(w);
    if (stage >= 3)
      window.weights = table.add({.name = name + ".weights",
                                  .shape = {n},
                                  .dtype = table[window.params.front()].dtype,
                                  .category = Category::comm,
                                  .first_op = w > 0 ? windows[w - 1].first_op : window.first_op,
                                  .last_op = window.last_op});
    if (window.writes_grads)
      window.grads = table.add({.name = name + ".grads",
                                .shape = {n},
                                .dtype = grads,
                                .category = Category::comm,
                                .first_op = window.first_op,
                                .last_op = w + 1 < windows.size() ? windows[w + 1].last_op : last_op});
    for (int i = window.first_op; i <= window.last_op; ++i) {
      Op& op = graph.ops[i];
      if (schedule.window_of_op[i] != static_cast<int>(w)) continue;
      op.window = {.weights = window.weights,
                   .grads = writes_gradients(op.kind()) ? window.grads : -1,
                   .first_param = window.params.front()};
    }
  }
  return schedule;
}

std::vector<BlockGradients> add_block_gradients(Graph& graph, const ZeroSchedule& schedule, DType grads) {
  if (schedule.stage >= 2) throw std::logic_error("block gradients: the ZeRO-2/3 windows hold them already");
  TensorTable& table = graph.table;
  std::map<int, BlockGradients> by_block;
  std::map<int, std::vector<int>> params;
  for (const BlockWindow& window : schedule.windows) {
    if (!window.writes_grads) continue;
    auto [it, first] = by_block.try_emplace(window.block);
    if (first) {
      it->second = {.block = window.block, .first_op = window.first_op};
      params[window.block] = window.params;
    }
    it->second.last_op = window.last_op;
  }
  std::vector<BlockGradients> blocks;
  for (auto& [block, b] : by_block) {
    const std::vector<int>& ids = params.at(block);
    b.first_param = ids.front();
    b.tensor = table.add({.name = "grads.block" + std::to_string(block),
                          .shape = {block_numel(table, ids)},
                          .dtype = grads,
                          .category = Category::grads,
                          .first_op = b.first_op,
                          .last_op = b.last_op});
    for (int i = b.first_op; i <= b.last_op; ++i) {
      Op& op = graph.ops[i];
      const int w = schedule.window_of_op[i];
      if (w >= 0 && schedule.windows[w].block == block && writes_gradients(op.kind()))
        op.window = {.weights = -1, .grads = b.tensor, .first_param = ids.front()};
    }
    blocks.push_back(b);
  }
  return blocks;
}

}  // namespace mt
