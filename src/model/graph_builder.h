// How a step's graph is written down: the tensor table and op list built side by side, the batch tensors and
// one emitter per kind of op, each naming its operands. transformer_graph.cpp writes the transformer with it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "memory/device_traits.h"
#include "model/base_quant.h"
#include "model/graph.h"
#include "model/lora.h"
#include "model/recompute.h"
#include "model/spec.h"

namespace mt {

// How one training step runs: the micro-batch shape, the device's sizes (its kernels' workspace, whether the
// host writes its memory), the storage dtype, the recompute policy and LoRA (which parameters train).
struct StepConfig {
  int64_t batch = 1;         // B, sequences per micro-batch
  int64_t seq_len = 1;       // T
  DeviceTraits device = {};  // for the dtype and T above (devices/devices.h)
  DType dtype = DType::f32;  // storage of weights and activations; statistics, logits and losses stay fp32
  RecomputeConfig recompute = {};
  LoraConfig lora = {};
  BaseQuantConfig base_quant = {};  // QLoRA: how LoRA's frozen linear weights are stored
  uint64_t seed = 0;                // the run's: LoRA dropout's masks
  bool loss_mask = false;  // the data has loss masks (data/shard.h): the loss counts the targets they mark
  bool packed = false;     // the data packs several records a sequence: batch.positions keeps them apart
  int tp = 1;              // tensor-parallel ranks (Megatron's layout): each holds 1/tp of the split tensors
  int tp_rank = 0;         // this rank's place among them
  // Sequence parallel (tp > 1): the norms and the residual stream hold this rank's B*T/tp tokens.
  bool sequence_parallel = false;
  int pp = 1;       // pipeline stages (Megatron's layout): each holds n_layer/pp consecutive layers
  int pp_rank = 0;  // this rank's stage
  // Pipeline parallel: the micro-batches of one step, all in the stage's graph under the 1F1B schedule.
  int64_t micro_batches = 1;
};

// Rows of logits computed at once by the LM head: the [rows, Vp] logits buffer is workspace, never [B*T, Vp].
constexpr int64_t kLogitsChunkRows = 256;

// A micro-batch's token ids, targets' loss mask and tokens' positions in their records (category other; the
// mask -1 without StepConfig::loss_mask, the positions without StepConfig::packed).
struct BatchTensors {
  int tokens = -1, targets = -1, loss_mask = -1, positions = -1;
};

// A model's step: the graph, its batches (one, or a pipeline stage's micro-batches of the step in order) and
// the parameters in creation order.
struct ModelGraph {
  Graph graph;
  std::vector<BatchTensors> batches;
  std::vector<int> params;
  // Pipeline parallel with a tied head: the embedding the first stage holds, or the last stage's copy of it;
  // the two stages keep them equal by summing their gradients. -1 elsewhere.
  int tied_embedding = -1;

  const BatchTensors& batch() const { return batches.front(); }  // the first, which evaluation reads
};

enum class NormKind { layernorm, rmsnorm };
enum class Activation { gelu, swiglu };

struct NormParams {
  int weight = -1, bias = -1;  // bias: LayerNorm only
};
// A norm's output and the statistics its backward reads (mean: LayerNorm only).
struct NormActs {
  int out = -1, mean = -1, rstd = -1;
};
// A LoRA adapter on a linear module's output columns [column, column + rows of b).
struct LoraAdapter {
  int a = -1, b = -1;
  int64_t column = 0;
};
struct LinearParams {
  int weight = -1, bias = -1;
  std::vector<LoraAdapter> adapters = {};
};
// Per adapter of a linear, the scaled hidden activation [B, T, r] its backward reads.
using LoraActs = std::vector<int>;

// Tensors in the compute dtype unless they are statistics (fp32 for accuracy) or fp32 scratch. An emitter
// named `name` with a `suffix` (".recomputed" under recompute) names its op name + suffix.
class GraphBuilder {
 public:
  // Adds the batch tensors (with host twins where the host cannot write the device's memory) and the matrix
  // products' conversion tiles, when the device needs them.
  GraphBuilder(ModelGraph& model, const StepConfig& step);

  const StepConfig& step() const { return step_; }
  const ModelGraph& model() const { return m_; }
  // Parameters from here on belong to a new block (TensorDesc::block: what ZeRO-2/3 exchange together).
  void begin_block() { ++block_; }
  // Also listed in model.params. Under LoRA a base parameter is frozen unless --lora-train-modules names it.
  int param(const std::string& name, std::vector<int64_t> shape);
  // A parameter this tensor-parallel rank holds part of: its shape is the shard's (TensorDesc::shard).
  int param(const std::string& name, TensorShard shard);
  // This rank's shard of a tensor of shape `whole` split along `dim`, each of `parts` (consecutive widths
  // along dim, summing to whole[dim]: a fused projection's modules) split evenly over the tp ranks.
  TensorShard shard(std::vector<int64_t> whole, int dim, const std::vector<int64_t>& parts) const;
  // Tensor parallel: sums `data` over the ranks in place (no op with one rank).
  void all_reduce(const std::string& name, int data);
  bool sequence_parallel() const { return step_.sequence_parallel && step_.tp > 1; }
  // The ops from here on are `pass` (Graph::passes); under pipeline parallelism, they and their tensors are
  // its micro-batch's (their names say so).
  void begin_pass(PipelinePass pass);
  const BatchTensors& batch() const { return m_.batches[static_cast<size_t>(micro_batch_)]; }
  // Pipeline parallel: `data` to the next stage (or the previous one); a send to a stage right before a
  // receive from it is one exchange, except at the end of the first forward (Graph::forward_end).
  void send(const std::string& name, int data, bool next);
  // A new residual-stream tensor `name` [.., width], received from the next stage (or the previous one).
  int receive(const std::string& name, int64_t width, bool next);
  // Marks the end of the first micro-batch's forward (Graph::forward_end); later calls do nothing.
  void end_first_forward();
  void mark_tied_embedding(int param) { m_.tied_embedding = param; }
  // The residual stream's tensors: this rank's token shard [B*T/tp, width] under sequence parallelism.
  int residual_act(std::string name, int64_t width);
  // The input of a column-parallel product from the residual stream's `shard`: under sequence parallelism a
  // new [B, T, width] tensor `name` gathered from every rank's shard, else the shard itself.
  int gathered(const std::string& name, int shard);
  // Where a row-parallel product (or a column-parallel one's input gradient) writes this rank's partial
  // sum: a new whole [B, T, width] tensor `name` under sequence parallelism, else `out` itself.
  int partial_sum(const std::string& name, int out);
  // The tensor-parallel ranks' partial sums `partial` into `out`: reduce-scattered into this rank's token
  // shard under sequence parallelism, else all-reduced in place (partial == out).
  void sum_partials(const std::string& name, int partial, int out);
  // module's LoRA factors a [r, in] and b [width, r], trainable, on the module's columns from `column`.
  LoraAdapter lora_adapter(const std::string& module, int64_t in, int64_t width, int64_t column);
  int tensor(std::string name, std::vector<int64_t> shape, Category c, DType dtype);
  int act(std::string name, std::vector<int64_t> shape);  // compute dtype
  int act(std::string name, int64_t width) {
    return act(std::move(name), {step_.batch, step_.seq_len, width});
  }
  int stat(std::string name, std::vector<int64_t> shape);  // fp32 activation
  int scratch(std::string name, int64_t floats);           // fp32 workspace
  void op(std::string name, OpArgs args);

  // The product, then each adapter's (named after its module, with `suffix`).
  LoraActs linear(const std::string& name, const std::string& suffix, int inp, int out, int residual,
                  const LinearParams& p, bool out_in);
  // The product's backward, then each adapter's, adding into dinp.
  void linear_backward(const std::string& name, int inp, const LinearParams& p, const LoraActs& lora,
                       int dinp, int dout, bool out_in);
  // A norm over the last dimension (width) into new output and statistics tensors.
  NormActs norm(NormKind kind, const std::string& name, const std::string& suffix, int inp, NormParams p,
                int64_t width);
  void norm_backward(NormKind kind, const std::string& name, int inp, NormParams p, const NormActs& acts,
                     int dinp, int dout);
  // Causal attention over qkv [B, T, C + 2 KV] with its scratch of scratch_floats.
  void attention(const std::string& name, const std::string& suffix, int qkv, int out, int lse,
                 int64_t scratch_floats);
  void attention_backward(const std::string& name, int qkv, int out, int lse, int dqkv, int dout,
                          int64_t scratch_floats);
  // GELU (inp [.., width]) or SwiGLU (inp [.., 2 width] = [gate | up]) into a new output [.., width].
  int activation(Activation kind, const std::string& name, const std::string& suffix, int inp, int64_t width);
  // GELU's backward runs in place (dinp == dout).
  void activation_backward(Activation kind, const std::string& name, int inp, int dinp, int dout);
  // The fused LM head + loss over inp [B,T,C] with weight [Vp,C] (tensor parallel: this rank's rows of the
  // vocabulary from vocab_begin); returns the gradient tensor of inp. Its
  // logits exist one chunk of rows at a time and the loss's gradient is taken inside the same op, so the step
  // never holds [B*T, Vp] logits. In 16-bit runs the loss gradient is rounded into its own chunk buffer.
  int lm_head_loss(int inp, int weight, int64_t C, int64_t Vp, int64_t vocab_begin);
  // Sets the lifetimes: the graph is complete.
  void finish();

 private:
  // A micro-batch's [B, T] tensor the host fills, and its staging twin where the device needs one.
  int batch_tensor(const std::string& name, DType dtype);
  // The workspace a quantized frozen weight's products dequantize into (-1 for any other weight).
  int dequant_tile(const std::string& name, int weight);
  std::string adapter_module(const LoraAdapter& adapter) const;
  // With dropout: a workspace tensor like `inp` for the dropped input; else -1.
  int lora_dropped(const std::string& name, int inp);
  ops::LoraDropout lora_dropout(const std::string& module) const;

  ModelGraph& m_;
  StepConfig step_;
  int mm_ = -1;  // matrix products' conversion tiles, when the compute dtype needs them
  int block_ = 0;
  int64_t micro_batch_ = 0;
  std::string name_suffix_;  // of the micro-batch's activations and workspace: "" or "@mb3"
  bool first_forward_ended_ = false;
};

}  // namespace mt
