#include "model/graph.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace mt {

std::vector<int> Op::operands() const {
  std::vector<int> ids;
  for_each_operand([&](int id) { ids.push_back(id); });
  return ids;
}

int param_block(const TensorTable& table, const Op& op) {
  int block = -1;
  op.for_each_operand([&](int id) {
    if (table[id].category != Category::params) return;
    if (block >= 0 && table[id].block != block)
      throw std::logic_error("graph: op " + op.name + " reads parameters of two blocks");
    block = table[id].block;
  });
  return block;
}

const GraphPass& pass_of(const Graph& graph, int op) {
  const auto after = std::upper_bound(graph.passes.begin(), graph.passes.end(), op,
                                      [](int i, const GraphPass& p) { return i < p.first_op; });
  if (after == graph.passes.begin())
    throw std::logic_error("graph: op " + std::to_string(op) + " before any pass");
  return *(after - 1);
}

void assign_lifetimes(Graph& graph) {
  for (int op = 0; op < static_cast<int>(graph.ops.size()); ++op) {
    graph.ops[op].for_each_operand([&](int id) {
      TensorDesc& t = graph.table[id];
      if (t.category != Category::activations && t.category != Category::workspace) return;
      t.first_op = t.first_op < 0 ? op : std::min(t.first_op, op);
      t.last_op = std::max(t.last_op, op);
    });
  }
  for (const TensorDesc& t : graph.table.tensors())
    if ((t.category == Category::activations || t.category == Category::workspace) && !t.has_lifetime())
      throw std::logic_error("graph: " + t.name + " is never used");
}

}  // namespace mt
