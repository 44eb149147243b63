#include "model/zero_schedule.h"

#include <map>
#include <stdexcept>
#include <string>

namespace mt {

namespace {

bool writes_gradients(OpKind kind) {
  return kind == OpKind::lm_head_loss || kind == OpKind::layernorm_backward ||
         kind == OpKind::rmsnorm_backward || kind == OpKind::linear_backward ||
         kind == OpKind::embedding_backward;
}

// The block of the parameters an op reads, or -1 when it reads none.
int block_of(const TensorTable& table, const Op& op) {
  int block = -1;
  for (int id : {op.weight, op.bias}) {
    if (id < 0 || table[id].category != Category::params) continue;
    if (block >= 0 && table[id].block != block)
      throw std::logic_error("zero schedule: op " + op.name + " reads parameters of two blocks");
    block = table[id].block;
  }
  return block;
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
  for (int id : params) n += table[id].numel();
  return n;
}

}  // namespace

ZeroSchedule add_zero_schedule(Graph& graph, int stage, DType grads) {
  ZeroSchedule schedule;
  schedule.stage = stage;
  schedule.window_of_op.assign(graph.ops.size(), -1);
  if (stage < 2) return schedule;
  TensorTable& table = graph.table;
  const std::map<int, std::vector<int>> blocks = params_by_block(table);
  std::vector<bool> window_writes;
  for (int i = 0; i < static_cast<int>(graph.ops.size()); ++i) {
    const int block = block_of(table, graph.ops[i]);
    if (block < 0) continue;
    if (schedule.windows.empty() || schedule.windows.back().block != block) {
      schedule.windows.push_back({.block = block, .first_op = i, .last_op = i, .params = blocks.at(block)});
      window_writes.push_back(false);
    }
    schedule.windows.back().last_op = i;
    if (writes_gradients(graph.ops[i].kind)) window_writes.back() = true;
    schedule.window_of_op[i] = static_cast<int>(schedule.windows.size()) - 1;
  }
  for (size_t w = 0; w < schedule.windows.size(); ++w) {
    BlockWindow& window = schedule.windows[w];
    const int64_t n = block_numel(table, window.params);
    const std::string name = "zero.block" + std::to_string(window.block) + ".window" + std::to_string(w);
    const DType weights = table[window.params.front()].dtype;
    if (stage >= 3)
      window.weights = table.add({.name = name + ".weights",
                                  .shape = {n},
                                  .dtype = weights,
                                  .category = Category::comm,
                                  .first_op = window.first_op,
                                  .last_op = window.last_op});
    if (window_writes[w])
      window.grads = table.add({.name = name + ".grads",
                                .shape = {n},
                                .dtype = grads,
                                .category = Category::comm,
                                .first_op = window.first_op,
                                .last_op = window.last_op});
  }
  return schedule;
}

}  // namespace mt
