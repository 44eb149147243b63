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
  int64_t flat_begin = 0, flat_end = 0;  // the block's parameters in the flat buffers
  // 8-bit moments: the part made of whole quantization blocks, updated with the block (all of it without).
  int64_t whole_begin = 0, whole_end = 0;
  std::vector<int> carries;  // the quantization blocks it shares with other blocks (BackwardUpdates::carries)
};

// A quantization block of 8-bit moments that straddles blocks: its scale covers elements of several blocks,
// so their gradients are copied into this tensor (Category::grads) as each block completes, and it is updated
// after the last of them, as the ordinary step would update it.
struct GradientCarry {
  int tensor = -1;
  int64_t flat_begin = 0, flat_end = 0;
  int last_op = 0;  // the op after which its last block's gradients are complete
};

struct BackwardUpdates {
  std::vector<BlockGradients> blocks;
  std::vector<GradientCarry> carries;
};

// The windows of the graph's ops; for stages 2 and 3 also their comm tensors (weights in the parameters'
// dtype, gradients in `grads`), added to the graph's table and set as the window buffers of its ops.
// `window_grads` false: no gradient sums in the windows, whose gradients go to add_block_gradients' tensors
// (stage 3's gathered weights stay).
ZeroSchedule add_zero_schedule(Graph& graph, int stage, DType grads, bool window_grads = true);

// The blocks' gradient tensors, added to the graph's table and named by the ops that write gradients (as
// ZeRO-2's window sums are); the schedule's windows must hold no gradient sums (add_zero_schedule's
// `window_grads` false, or stage 0 or 1); under stage 3 the ops keep reading the gathered weights.
// `moment_block`: elements per quantization block of 8-bit moments, 0 for none. Every parameter's block must
// get gradients, or the ordinary step's decay of it would be missed.
BackwardUpdates add_block_gradients(Graph& graph, const ZeroSchedule& schedule, DType grads,
                                    int64_t moment_block);

}  // namespace mt
