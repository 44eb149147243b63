#include "model/graph.h"

#include <algorithm>
#include <stdexcept>

namespace mt {

std::vector<int> Op::operands() const {
  std::vector<int> ids;
  for (int id : {inp, out, residual, weight, bias, stat0, stat1, dinp, dout, scratch, dscratch,
                 matmul_scratch, labels})
    if (id >= 0) ids.push_back(id);
  return ids;
}

void assign_lifetimes(Graph& graph) {
  for (int op = 0; op < static_cast<int>(graph.ops.size()); ++op) {
    for (int id : graph.ops[op].operands()) {
      TensorDesc& t = graph.table[id];
      if (t.category != Category::activations && t.category != Category::workspace) continue;
      t.first_op = t.first_op < 0 ? op : std::min(t.first_op, op);
      t.last_op = std::max(t.last_op, op);
    }
  }
  for (const TensorDesc& t : graph.table.tensors())
    if ((t.category == Category::activations || t.category == Category::workspace) && !t.has_lifetime())
      throw std::logic_error("graph: " + t.name + " is never used");
}

}  // namespace mt
