// ZeRO-2 and ZeRO-3 as part of the step schedule. The ops run in windows: maximal runs of consecutive ops
// whose parameters all belong to one block (an embedding, a layer, the final norm; ops without parameters
// do not end a window). Under stage 3 a window gathers its block's weights into a comm tensor that lives for
// the window; under stages 2 and 3 a window whose ops write gradients collects them in a comm tensor that is
// reduced to the ranks owning each part of the block when the window ends. Both are TensorTable entries with
// lifetimes, so the Plan packs them by offset like activations, and the estimate counts them exactly.
#pragma once

#include <vector>

#include "model/graph.h"

namespace mt {

struct BlockWindow {
  int block = -1;
  int first_op = 0, last_op = 0;
  std::vector<int> params;  // the block's parameters, consecutive in the flat parameter buffer
  int weights = -1;         // stage 3: the block's gathered weights (comm)
  int grads = -1;           // stage >= 2, when an op of the window writes gradients: their sum (comm)
};

struct ZeroSchedule {
  int stage = 0;
  std::vector<BlockWindow> windows;
  std::vector<int> window_of_op;  // per op: its window, or -1 for an op outside every window
};

// Adds the windows' comm tensors (weights in the parameters' dtype, gradients in `grads`) to the graph's
// table. Stages 0 and 1 exchange whole buffers instead and get no windows.
ZeroSchedule add_zero_schedule(Graph& graph, int stage, DType grads);

}  // namespace mt
