#include "model/zero_schedule.h"

#include <algorithm>
#include <map>
#include <stdexcept>
#include <string>

#include "core/int_math.h"
#include "memory/plan.h"

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

ZeroSchedule add_zero_schedule(Graph& graph, int stage, DType grads, bool window_grads) {
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
    if (window.writes_grads && window_grads)
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

namespace {

// The gradient tensors of the blocks that write gradients, each named by its block's ops that write them.
std::vector<BlockGradients> block_gradient_tensors(Graph& graph, const ZeroSchedule& schedule, DType grads) {
  TensorTable& table = graph.table;
  const std::vector<int64_t> offsets = flat_param_offsets(table);
  std::map<int, BlockGradients> by_block;
  for (const BlockWindow& window : schedule.windows) {
    if (!window.writes_grads) continue;
    auto [it, first] = by_block.try_emplace(window.block);
    BlockGradients& b = it->second;
    if (first) {
      const int64_t begin = offsets[window.params.front()];
      b = {.block = window.block,
           .first_param = window.params.front(),
           .first_op = window.first_op,
           .flat_begin = begin,
           .flat_end = begin + block_numel(table, window.params),
           .carries = {}};
    }
    b.last_op = window.last_op;
  }
  std::vector<BlockGradients> blocks;
  for (auto& [block, b] : by_block) {
    b.tensor = table.add({.name = "grads.block" + std::to_string(block),
                          .shape = {b.flat_end - b.flat_begin},
                          .dtype = grads,
                          .category = Category::grads,
                          .first_op = b.first_op,
                          .last_op = b.last_op});
    for (int i = b.first_op; i <= b.last_op; ++i) {
      Op& op = graph.ops[i];
      const int w = schedule.window_of_op[i];
      if (w >= 0 && schedule.windows[w].block == block && writes_gradients(op.kind()))
        op.window = {.weights = schedule.windows[w].weights, .grads = b.tensor, .first_param = b.first_param};
    }
    blocks.push_back(b);
  }
  return blocks;
}

}  // namespace

BackwardUpdates add_block_gradients(Graph& graph, const ZeroSchedule& schedule, DType grads,
                                    int64_t moment_block) {
  for (const BlockWindow& window : schedule.windows)
    if (window.grads >= 0) throw std::logic_error("block gradients: the ZeRO-2/3 windows hold them already");
  BackwardUpdates updates{.blocks = block_gradient_tensors(graph, schedule, grads), .carries = {}};
  int64_t n = 0;  // the flat parameters
  for (const TensorDesc& t : graph.table.tensors())
    if (t.category == Category::params) n = checked_add(n, t.numel());
  int64_t covered = 0;
  for (const BlockGradients& b : updates.blocks) covered += b.flat_end - b.flat_begin;
  if (covered != n) throw std::logic_error("block gradients: a parameter's block gets no gradients");
  const int64_t q = std::max<int64_t>(moment_block, 1);
  std::map<int64_t, int> carry_of;  // quantization block -> its carry
  std::vector<int> carry_first_op;  // per carry: the first of its blocks' last ops
  for (BlockGradients& b : updates.blocks) {
    // The quantization blocks wholly inside the block: from its first block start, to its last block start
    // or to the end of the parameters, whose last quantization block may be short.
    b.whole_begin = std::min(round_up(b.flat_begin, q), b.flat_end);
    b.whole_end = std::max(b.whole_begin, b.flat_end == n ? n : b.flat_end / q * q);
    for (const int64_t begin : {b.flat_begin / q * q, b.whole_end}) {
      if (begin >= b.flat_end || (begin >= b.whole_begin && begin < b.whole_end)) continue;
      auto [it, first] = carry_of.try_emplace(begin / q, static_cast<int>(updates.carries.size()));
      if (first) {
        updates.carries.push_back(
            {.tensor = -1, .flat_begin = begin, .flat_end = std::min(begin + q, n), .last_op = b.last_op});
        carry_first_op.push_back(b.last_op);
      }
      GradientCarry& carry = updates.carries[it->second];
      carry.last_op = std::max(carry.last_op, b.last_op);
      carry_first_op[it->second] = std::min(carry_first_op[it->second], b.last_op);
      if (b.carries.empty() || b.carries.back() != it->second) b.carries.push_back(it->second);
    }
  }
  for (size_t c = 0; c < updates.carries.size(); ++c) {
    GradientCarry& carry = updates.carries[c];
    carry.tensor = graph.table.add({.name = "grads.carry" + std::to_string(carry.flat_begin / q),
                                    .shape = {carry.flat_end - carry.flat_begin},
                                    .dtype = grads,
                                    .category = Category::grads,
                                    .first_op = carry_first_op[c],
                                    .last_op = carry.last_op});
  }
  return updates;
}

}  // namespace mt
