// ZeRO's exchanges as part of the step schedule. The ops run in windows: maximal runs of consecutive ops
// whose parameters all belong to one block (an embedding, a layer, the final norm; ops without parameters
// do not end a window). Stages 0 and 1 exchange a block's gradients after its last window of the step's
// backward, while the backward of earlier blocks goes on. Under stage 3 a window reads its block's weights
// from a comm tensor gathered during the window before (prefetch); under stages 2 and 3 a window whose ops
// write gradients sums them in a comm tensor that is reduced to the ranks owning each part of the block
// during the window after. Both are TensorTable entries with lifetimes, so the Plan packs them by offset like
// activations, and the estimate counts them exactly; each op of the window names them (Op::window), so the
// executor reads and writes them, never a model-state buffer this rank holds only a shard of.
#pragma once

#include <vector>

#include "model/graph.h"

namespace mt {

struct BlockWindow {
  int block = -1;
  int first_op = 0, last_op = 0;
  std::vector<int> params;           // the block's parameters, consecutive in the flat parameter buffer
  bool writes_grads = false;         // an op of the window writes gradients of the block
  bool last_grads_of_block = false;  // and no later window does
  int weights = -1;  // stage 3: the block's gathered weights (comm), live from the previous window's start
  int grads = -1;    // stages 2, 3 and writes_grads: their sum (comm), live until the next window's end
};

struct ZeroSchedule {
  int stage = 0;
  std::vector<BlockWindow> windows;
  std::vector<int> window_of_op;  // per op: its window, or -1 for an op outside every window
};

// --optimizer-in-backward on one rank: a block's gradients as one tensor (Category::grads, the block's flat
// range from its first parameter on), live from the first op that writes them to the last, after which the
// block is updated (train/backward_update.h) and the tensor's memory goes to the next blocks'.
struct BlockGradients {
  int block = -1;
  int tensor = -1;
  int first_param = -1;  // element 0 of the tensor
  int first_op = 0, last_op = 0;
};

// The windows of the graph's ops; for stages 2 and 3 also their comm tensors (weights in the parameters'
// dtype, gradients in `grads`), added to the graph's table and set as the window buffers of its ops.
ZeroSchedule add_zero_schedule(Graph& graph, int stage, DType grads);

// The blocks' gradient tensors, added to the graph's table and named by the ops that write gradients (as
// ZeRO-2's window sums are); the schedule's windows must be stage 0's or 1's, which add no comm tensors.
std::vector<BlockGradients> add_block_gradients(Graph& graph, const ZeroSchedule& schedule, DType grads);

}  // namespace mt
