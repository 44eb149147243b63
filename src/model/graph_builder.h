// What the model builders (gpt2.cpp, llama.cpp) share: the table and op list built side by side, the batch
// tensors, linear layers, the fused LM head + loss, and the loops over the layers, forward and backward under
// a recompute policy. A model supplies its parameters and one block's ops (BlockEmitter).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu_isa.h"
#include "model/graph.h"
#include "model/recompute.h"

namespace mt {

// How one training step runs: the micro-batch shape, the threads and ISA level kernels size their scratch
// for, the storage dtype and the recompute policy.
struct StepConfig {
  int64_t batch = 1;         // B, sequences per micro-batch
  int64_t seq_len = 1;       // T
  int threads = 0;           // OpenMP threads the kernels' scratch is sized for; 0: omp_get_max_threads()
  DType dtype = DType::f32;  // storage of weights and activations; statistics, logits and losses stay fp32
  kernels::CpuIsa isa = kernels::cpu_isa();  // the level the kernels run at (bf16 products' tiles)
  RecomputeConfig recompute = {};
};

// Rows of logits computed at once by the LM head: the [rows, Vp] logits buffer is workspace, never [B*T, Vp].
constexpr int64_t kLogitsChunkRows = 256;

// A model's step: the graph, the batch's token ids (category other) and the parameters in creation order.
struct ModelGraph {
  Graph graph;
  int tokens = -1, targets = -1;
  std::vector<int> params;
};

// Tensors in the compute dtype unless they are statistics (fp32 for accuracy) or fp32 scratch.
class GraphBuilder {
 public:
  // Resolves step.threads and adds the batch tensors and the matrix products' conversion tiles (16-bit inputs
  // the library does not multiply at step.isa).
  GraphBuilder(ModelGraph& model, const StepConfig& step);

  const StepConfig& step() const { return step_; }
  // Parameters from here on belong to a new block (TensorDesc::block: what ZeRO-2/3 exchange together).
  void begin_block() { ++block_; }
  int param(const std::string& name, std::vector<int64_t> shape);  // also listed in model.params
  int tensor(const std::string& name, std::vector<int64_t> shape, Category c, DType dtype);
  int act(const std::string& name, std::vector<int64_t> shape);  // compute dtype
  int act(const std::string& name, int64_t width) { return act(name, {step_.batch, step_.seq_len, width}); }
  int stat(const std::string& name, std::vector<int64_t> shape);  // fp32 activation
  int scratch(const std::string& name, int64_t floats);           // fp32 workspace
  void op(Op o);

  void linear(const std::string& name, int inp, int out, int residual, int w, int bias, bool out_in = false);
  void linear_backward(const std::string& name, int inp, int w, int bias, int dinp, int dout,
                       bool out_in = false);
  // The fused LM head + loss over inp [B,T,C] with weight [Vp,C]; returns the gradient tensor of inp. Its
  // logits exist one chunk of rows at a time and the loss's gradient is taken inside the same op, so the step
  // never holds [B*T, Vp] logits. In 16-bit runs the loss gradient is rounded into its own chunk buffer.
  int lm_head_loss(int inp, int weight, int64_t C, int64_t Vp);
  // Sets the lifetimes: the graph is complete.
  void finish();

 private:
  ModelGraph& m_;
  StepConfig step_;
  int mm_ = -1;  // matrix products' conversion tiles, when the compute dtype needs them
  int block_ = 0;
};

// One transformer block's ops. Forward tensors emitted with suffix ".recomputed" (full recompute) are new
// tensors, alive from the recompute to their last backward use; the block keeps the latest ones per layer.
class BlockEmitter {
 public:
  virtual ~BlockEmitter() = default;
  // Emits layer l's forward from inp; returns its output, the residual stream after the layer.
  virtual int forward(int64_t l, int inp, const std::string& suffix) = 0;
  // Emits layer l's backward from its latest forward; the residual gradient dres flows through in place.
  // With `selective`, the cheap elementwise outputs are recomputed right before the op that needs them.
  virtual void backward(int64_t l, int dres, bool selective) = 0;
};

// The blocks' forward from inp, layer after layer; each layer's output is the next one's input, the residual
// stream never copied. Returns the last output; inputs[l] is layer l's input.
int emit_layers_forward(BlockEmitter& blocks, int64_t n_layer, int inp, std::vector<int>& inputs);

// The blocks' backward from the top, rerunning each full-recompute group's forward from the input it kept
// when the backward enters the group.
void emit_layers_backward(BlockEmitter& blocks, const StepConfig& step, int64_t n_layer,
                          const std::vector<int>& inputs, int dres);

}  // namespace mt
