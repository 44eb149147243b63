// The step schedule as data: a list of ops over the TensorTable's tensors. The executor runs this list, and
// the lifetimes the Plan packs are read off the same list, so the memory plan and the run cannot disagree.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "memory/tensor_table.h"
#include "model/pipeline_schedule.h"

namespace mt {

// One alternative of OpArgs per kind, in the same order (checked below).
enum class OpKind {
  embedding,
  layernorm,
  rmsnorm,
  linear,
  rope,
  attention,
  gelu,
  swiglu,
  lm_head_loss,
  layernorm_backward,
  rmsnorm_backward,
  linear_backward,
  rope_backward,
  attention_backward,
  gelu_backward,
  swiglu_backward,
  embedding_backward,
  zero,
  lora,
  lora_backward,
  all_reduce,
  all_gather,
  reduce_scatter,
  pipe_exchange,
};

// The operands of each kind of op, by what they hold: TensorTable ids, -1 for an optional one left out.
// Parameter gradients share their parameter's id. ids() lists every operand.
namespace ops {

// `positions` ([B, T] i32, packed sequences only) is each token's position in its record: the learned
// position it reads, its rotary angle, and how far back it attends (its record only). -1: the index in the
// row.

// Tensor parallel: wte holds the vocabulary rows from vocab_begin; other tokens' rows are zero, and the
// tensor-parallel ranks' outputs are summed after the op.
struct Embedding {  // out = wte[tokens] (+ wpe[positions])
  static constexpr OpKind kind = OpKind::embedding;
  int out = -1, wte = -1, wpe = -1, tokens = -1, positions = -1;
  int64_t vocab_begin = 0;
  auto ids() { return std::tie(out, wte, wpe, tokens, positions); }
};

struct LayerNorm {  // out, mean, rstd  <-  inp, weight, bias
  static constexpr OpKind kind = OpKind::layernorm;
  int inp = -1, out = -1, weight = -1, bias = -1, mean = -1, rstd = -1;
  auto ids() { return std::tie(inp, out, weight, bias, mean, rstd); }
};

struct RmsNorm {  // out, rstd  <-  inp, weight
  static constexpr OpKind kind = OpKind::rmsnorm;
  int inp = -1, out = -1, weight = -1, rstd = -1;
  auto ids() { return std::tie(inp, out, weight, rstd); }
};

// Sequence parallel: a residual with fewer rows than out goes into out's rows from residual_row, the rest
// start at zero (this rank's token shard of a product the ranks then reduce-scatter).
struct Linear {  // out = inp @ weight + bias (+ residual, copied into out first)
  static constexpr OpKind kind = OpKind::linear;
  int inp = -1, out = -1, residual = -1, weight = -1, bias = -1;
  int matmul_scratch = -1;     // conversion tiles, when the compute dtype needs them
  int dequant_tile = -1;       // a quantized frozen weight's columns, dequantized a tile at a time
  bool weight_out_in = false;  // weight stored [out, in] (torch.nn.Linear) rather than [in, out]
  int64_t residual_row = 0;
  auto ids() { return std::tie(inp, out, residual, weight, bias, matmul_scratch, dequant_tile); }
};

struct Rope {  // q and k of qkv rotated in place
  static constexpr OpKind kind = OpKind::rope;
  int qkv = -1, positions = -1;
  auto ids() { return std::tie(qkv, positions); }
};

struct Attention {  // out, lse (log-sum-exp per head and position)  <-  qkv
  static constexpr OpKind kind = OpKind::attention;
  int qkv = -1, out = -1, lse = -1, scratch = -1, positions = -1;
  auto ids() { return std::tie(qkv, out, lse, scratch, positions); }
};

struct Gelu {  // out = gelu(inp)
  static constexpr OpKind kind = OpKind::gelu;
  int inp = -1, out = -1;
  auto ids() { return std::tie(inp, out); }
};

struct Swiglu {  // out = silu(gate) * up
  static constexpr OpKind kind = OpKind::swiglu;
  int gate_up = -1, out = -1;
  auto ids() { return std::tie(gate_up, out); }
};

// Per-position losses of inp @ weight^T against targets, a chunk of logits at a time, their sum over the
// step's counted targets (OpRun::loss_targets) added into loss_sum (the step's mean, which the trainer reads
// once); training also takes dinp and the weight's gradient. 16-bit runs round the logits' gradient into
// logits_grad. With loss_mask (u8, 1: counted) only the counted targets add a loss, and the others get no
// gradient. Tensor
// parallel: weight holds the vocabulary rows from vocab_begin, and each chunk's softmax combines the ranks'
// row statistics (row_stats [tp, 3, rows]: max, sum of exponentials, target logit); dinp is this rank's part
// of the input's gradient, summed after the op.
struct LmHeadLoss {
  static constexpr OpKind kind = OpKind::lm_head_loss;
  int inp = -1, weight = -1, losses = -1, dinp = -1, logits = -1, logits_grad = -1, matmul_scratch = -1,
      targets = -1, loss_mask = -1, row_stats = -1, loss_sum = -1;
  int64_t vocab_begin = 0;
  auto ids() {
    return std::tie(inp, weight, losses, dinp, logits, logits_grad, matmul_scratch, targets, loss_mask,
                    row_stats, loss_sum);
  }
};

struct LayerNormBackward {  // dinp +=, grads of weight and bias  <-  dout, inp, weight, mean, rstd
  static constexpr OpKind kind = OpKind::layernorm_backward;
  int inp = -1, weight = -1, bias = -1, mean = -1, rstd = -1, dinp = -1, dout = -1;
  auto ids() { return std::tie(inp, weight, bias, mean, rstd, dinp, dout); }
};

struct RmsNormBackward {  // dinp +=, grad of weight  <-  dout, inp, weight, rstd
  static constexpr OpKind kind = OpKind::rmsnorm_backward;
  int inp = -1, weight = -1, rstd = -1, dinp = -1, dout = -1;
  auto ids() { return std::tie(inp, weight, rstd, dinp, dout); }
};

struct LinearBackward {  // dinp (=, or += with accumulate), grads of weight and bias  <-  dout, inp, weight
  static constexpr OpKind kind = OpKind::linear_backward;
  int inp = -1, weight = -1, bias = -1, dinp = -1, dout = -1, matmul_scratch = -1;
  int dequant_tile = -1;  // as Linear's
  bool accumulate = false;
  bool weight_out_in = false;
  auto ids() { return std::tie(inp, weight, bias, dinp, dout, matmul_scratch, dequant_tile); }
};

struct RopeBackward {  // dq and dk of dqkv rotated back in place
  static constexpr OpKind kind = OpKind::rope_backward;
  int dqkv = -1, positions = -1;
  auto ids() { return std::tie(dqkv, positions); }
};

struct AttentionBackward {  // dqkv  <-  dout, qkv, out, lse
  static constexpr OpKind kind = OpKind::attention_backward;
  int qkv = -1, out = -1, lse = -1, dqkv = -1, dout = -1, scratch = -1, positions = -1;
  auto ids() { return std::tie(qkv, out, lse, dqkv, dout, scratch, positions); }
};

struct GeluBackward {  // dinp = dout * gelu'(inp), in place when dinp == dout
  static constexpr OpKind kind = OpKind::gelu_backward;
  int inp = -1, dinp = -1, dout = -1;
  auto ids() { return std::tie(inp, dinp, dout); }
};

struct SwigluBackward {  // dgate_up  <-  dout, gate_up
  static constexpr OpKind kind = OpKind::swiglu_backward;
  int gate_up = -1, dgate_up = -1, dout = -1;
  auto ids() { return std::tie(gate_up, dgate_up, dout); }
};

struct EmbeddingBackward {  // grads of wte (its rows from vocab_begin) and wpe  <-  dout
  static constexpr OpKind kind = OpKind::embedding_backward;
  int wte = -1, wpe = -1, dout = -1, tokens = -1, positions = -1;
  int64_t vocab_begin = 0;
  auto ids() { return std::tie(wte, wpe, dout, tokens, positions); }
};

struct Zero {  // out = 0: a gradient that backward ops accumulate into
  static constexpr OpKind kind = OpKind::zero;
  int out = -1;
  auto ids() { return std::tie(out); }
};

// LoRA's dropout on the adapter's input, training only: each element is kept with probability 1 - p and
// scaled by 1 / (1 - p), by counter-based bits of (seed, stream, the element's place among all samples' in
// the global sample order: exec/op_shapes.h DropoutMask); the backward draws the same mask again rather than
// keeping it.
struct LoraDropout {
  float p = 0.0f;
  uint64_t seed = 0, stream = 0;  // the run's seed; the module's name hashed
};

// A LoRA adapter on a linear op's output columns [column, column + B's rows) (one Hugging Face module of a
// fused projection): hidden = scale * inp @ a^T, out[:, columns] += hidden @ b^T, after the base product.
struct Lora {
  static constexpr OpKind kind = OpKind::lora;
  int inp = -1, out = -1, a = -1, b = -1, hidden = -1, matmul_scratch = -1;
  int dropped = -1;  // workspace [B, T, in]: dropout(inp), with dropout only
  int64_t column = 0;
  float scale = 1.0f;
  LoraDropout dropout = {};
  auto ids() { return std::tie(inp, out, a, b, hidden, matmul_scratch, dropped); }
};

// grads of a and b, dinp +=  <-  dout's columns, inp, hidden; after the base linear's backward wrote dinp.
// grad_hidden is scratch: scale * dout[:, columns] @ b.
struct LoraBackward {
  static constexpr OpKind kind = OpKind::lora_backward;
  int inp = -1, a = -1, b = -1, hidden = -1, dinp = -1, dout = -1, grad_hidden = -1, matmul_scratch = -1;
  int dropped = -1;  // workspace [B, T, in]: dropout(inp) again, then the input's gradient before the mask
  int64_t column = 0;
  float scale = 1.0f;
  LoraDropout dropout = {};
  auto ids() { return std::tie(inp, a, b, hidden, dinp, dout, grad_hidden, matmul_scratch, dropped); }
};

// Tensor parallel: data = the sum of every tensor-parallel rank's data, in place (Megatron's all-reduce after
// a row-parallel product's forward and a column-parallel product's backward).
struct AllReduce {
  static constexpr OpKind kind = OpKind::all_reduce;
  int data = -1;
  auto ids() { return std::tie(data); }
};

// Sequence parallel: out [B*T, C] = the tensor-parallel ranks' token shards inp [B*T/tp, C] in rank order
// (before a column-parallel product, and the residual gradient before a row-parallel one's backward).
struct AllGather {
  static constexpr OpKind kind = OpKind::all_gather;
  int inp = -1, out = -1;
  auto ids() { return std::tie(inp, out); }
};

// Sequence parallel: out [B*T/tp, C] = this rank's token shard of the sum over the ranks of inp [B*T, C]
// (after a row-parallel product, and a column-parallel one's input gradient).
struct ReduceScatter {
  static constexpr OpKind kind = OpKind::reduce_scatter;
  int inp = -1, out = -1;
  auto ids() { return std::tie(inp, out); }
};

// Pipeline parallel: sends `send` to, and receives `recv` from, the neighbouring stage (the next one, or the
// previous one), both at once when both are given: 1F1B's send-forward-receive-backward after a forward in
// the steady state, and send-backward-receive-forward after a backward, which two stages run against each
// other without either waiting for the other.
struct PipeExchange {
  static constexpr OpKind kind = OpKind::pipe_exchange;
  int send = -1, recv = -1;
  bool next = true;  // the peer: the next stage, else the previous one
  auto ids() { return std::tie(send, recv); }
};

}  // namespace ops

using OpArgs =
    std::variant<ops::Embedding, ops::LayerNorm, ops::RmsNorm, ops::Linear, ops::Rope, ops::Attention,
                 ops::Gelu, ops::Swiglu, ops::LmHeadLoss, ops::LayerNormBackward, ops::RmsNormBackward,
                 ops::LinearBackward, ops::RopeBackward, ops::AttentionBackward, ops::GeluBackward,
                 ops::SwigluBackward, ops::EmbeddingBackward, ops::Zero, ops::Lora, ops::LoraBackward,
                 ops::AllReduce, ops::AllGather, ops::ReduceScatter, ops::PipeExchange>;

namespace detail {
template <size_t... I>
constexpr bool kinds_in_order(std::index_sequence<I...>) {
  return ((std::variant_alternative_t<I, OpArgs>::kind == static_cast<OpKind>(I)) && ...);
}
}  // namespace detail
static_assert(detail::kinds_in_order(std::make_index_sequence<std::variant_size_v<OpArgs>>()),
              "OpArgs alternatives must follow OpKind");

// Under ZeRO-2/3 (model/zero_schedule.h) the ops of a block's window read its parameters from, and sum their
// gradients into, comm tensors that hold the block's flat range; without them the model-state buffers.
struct WindowBuffers {
  int weights = -1;      // stage 3: the block's weights, gathered from their owners
  int grads = -1;        // stages 2, 3, ops that write gradients: the window's gradient sum
  int first_param = -1;  // the block's first parameter, element 0 of both tensors
};

struct Op {
  std::string name;
  OpArgs args;
  WindowBuffers window = {};

  OpKind kind() const { return static_cast<OpKind>(args.index()); }
  template <typename A>
  const A& as() const {
    return std::get<A>(args);
  }
  // Calls f(id) for every tensor the op touches, window buffers included.
  template <typename F>
  void for_each_operand(F f) const {
    auto call = [&](int id) {
      if (id >= 0) f(id);
    };
    std::visit([&](auto a) { std::apply([&](auto... id) { (call(id), ...); }, a.ids()); }, args);
    call(window.weights);
    call(window.grads);
  }
  std::vector<int> operands() const;
};

// One micro-batch's forward or backward, from the op it starts at to the next pass's first op.
struct GraphPass {
  int first_op = 0;
  PipelinePass pass;
};

struct Graph {
  TensorTable table;
  std::vector<Op> ops;
  // ops[loss_op] computes the (first micro-batch's) loss; -1 on a pipeline stage before the last.
  int loss_op = 0;
  // Ops [0, forward_end) are the first micro-batch's forward up to its loss (or its send to the next stage):
  // what evaluation runs, without gradients. Training runs all.
  int forward_end = 1;
  // The step's loss: the sum over its loss ops of each one's mean (f64 [1], category other); -1 on a
  // pipeline stage without the head.
  int loss_sum = -1;
  int tp = 1;  // tensor-parallel ranks its split tensors were sized for
  int pp = 1;  // pipeline stages: the graph is one stage's, all the step's micro-batches under 1F1B
  std::vector<GraphPass> passes;  // in the order they run: one forward and one backward without pipelines
};

// The pass op `op` runs in.
const GraphPass& pass_of(const Graph& graph, int op);

// The block (TensorDesc::block) of the parameters the op reads, or -1 when it reads none; a logic error when
// they belong to two blocks.
int param_block(const TensorTable& table, const Op& op);

// Sets first_op/last_op of every activation and workspace tensor from the ops that touch it.
void assign_lifetimes(Graph& graph);

}  // namespace mt
