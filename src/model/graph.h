// The step schedule as data: a list of ops over the TensorTable's tensors. The executor runs this list, and
// the lifetimes the Plan packs are read off the same list, so the memory plan and the run cannot disagree.
#pragma once

#include <string>
#include <vector>

#include "memory/tensor_table.h"

namespace mt {

enum class OpKind {
  embedding,           // out = wte[tokens] (weight) + wpe (bias, when set)
  layernorm,           // out, stat0 = mean, stat1 = rstd  <-  inp, weight, bias
  rmsnorm,             // out, stat1 = rstd  <-  inp, weight
  linear,              // out = inp @ weight + bias (+ residual when set); weight [out, in] when weight_out_in
  rope,                // out (qkv): q and k rotated in place
  attention,           // out, stat0 = lse  <-  inp (qkv), scratch
  gelu,                // out = gelu(inp)
  swiglu,              // out = silu(gate) * up  <-  inp = [gate | up]
  lm_head_loss,        // losses of inp @ weight^T against labels; training: dinp and weight grad too
  layernorm_backward,  // dinp += ..., grads of weight and bias  <-  dout, inp, weight, stat0, stat1
  rmsnorm_backward,    // dinp += ..., grad of weight  <-  dout, inp, weight, stat1
  linear_backward,     // dinp (=, or += with accumulate) and grads  <-  dout, inp, weight
  rope_backward,       // dinp (dqkv): dq and dk rotated back in place
  attention_backward,  // dinp (dqkv)  <-  dout, inp (qkv), out, stat0, scratch
  gelu_backward,       // dinp = dout * gelu'(inp), in place when dinp == dout
  swiglu_backward,     // dinp = [dgate | dup]  <-  dout, inp
  embedding_backward,  // grads of wte (weight) and wpe (bias, when set)  <-  dout
  zero,                // out = 0 (a gradient that backward ops accumulate into)
};

struct Op {
  OpKind kind;
  std::string name;
  // Operands are TensorTable ids; -1 when the op does not use the slot. Parameter gradients share their
  // parameter's id (they live at the same offset of the gradient buffer).
  int inp = -1, out = -1, residual = -1;
  int weight = -1, bias = -1;
  int stat0 = -1, stat1 = -1;
  int dinp = -1, dout = -1;
  int scratch = -1;
  int dscratch = -1;        // lm_head in 16-bit runs: the logits' gradient in the compute dtype
  int matmul_scratch = -1;  // ops with matrix products, when the compute dtype needs conversion tiles
  int labels = -1;          // token ids: the embedding's input tokens, the loss's targets
  bool accumulate = false;
  bool weight_out_in = false;  // linear: weight stored [out, in] (torch.nn.Linear) rather than [in, out]

  std::vector<int> operands() const;
};

struct Graph {
  TensorTable table;
  std::vector<Op> ops;
  // ops[loss_op] computes the loss; evaluation runs ops [0, loss_op] without gradients, training runs all.
  int loss_op = 0;
  int threads = 1;  // OpenMP threads the kernels' scratch tensors were sized for
};

// Sets first_op/last_op of every activation and workspace tensor from the ops that touch it.
void assign_lifetimes(Graph& graph);

}  // namespace mt
