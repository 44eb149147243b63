#include "model/graph_builder.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "core/rng.h"

namespace mt {

GraphBuilder::GraphBuilder(ModelGraph& model, const StepConfig& step) : m_(model), step_(step) {
  m_.graph.tp = step_.tp;
  m_.graph.pp = step_.pp;
  m_.graph.loss_op = -1;  // until the head's op, on the last stage
  // Matrix products whose inputs the device's library cannot take directly get conversion tiles (on the CPU:
  // f16, and bf16 without AVX512-BF16).
  if (step_.device.matmul_scratch_floats > 0)
    mm_ = scratch("matmul.scratch", step_.device.matmul_scratch_floats);
  const int64_t micro_batches = step_.pp > 1 ? step_.micro_batches : 1;
  for (int64_t i = 0; i < micro_batches; ++i) {
    const std::string name = micro_batches > 1 ? "batch" + std::to_string(i) : "batch";
    BatchTensors batch;
    batch.tokens = batch_tensor(name + ".tokens", DType::i32);
    batch.targets = batch_tensor(name + ".targets", DType::i32);
    if (step_.loss_mask) batch.loss_mask = batch_tensor(name + ".loss_mask", DType::u8);
    if (step_.packed) batch.positions = batch_tensor(name + ".positions", DType::i32);
    m_.batches.push_back(batch);
  }
}

int GraphBuilder::batch_tensor(const std::string& name, DType dtype) {
  const std::vector<int64_t> shape{step_.batch, step_.seq_len};
  const int id = tensor(name, shape, Category::other, dtype);
  if (!step_.device.host_memory) {
    const int staging = tensor(name + ".staging", shape, Category::other, dtype);
    m_.graph.table[staging].space = MemorySpace::host;
    m_.graph.table[id].staging = staging;
  }
  return id;
}

void GraphBuilder::begin_pass(PipelinePass pass) {
  micro_batch_ = pass.micro_batch;
  name_suffix_ = step_.pp > 1 ? "@mb" + std::to_string(pass.micro_batch) : "";
  m_.graph.passes.push_back({static_cast<int>(m_.graph.ops.size()), pass});
}

void GraphBuilder::send(const std::string& name, int data, bool next) {
  op(name + ".send", ops::PipeExchange{.send = data, .next = next});
}

int GraphBuilder::receive(const std::string& name, int64_t width, bool next) {
  const int out = residual_act(name, width);
  std::vector<Op>& ops = m_.graph.ops;
  // Evaluation runs ops [0, forward_end): the exchange that ends the first forward must not also wait for the
  // gradient of a backward (1F1B with one micro-batch), which evaluation never sends.
  const bool after_first_forward =
      first_forward_ended_ && static_cast<int>(ops.size()) > m_.graph.forward_end;
  if (after_first_forward && ops.back().kind() == OpKind::pipe_exchange) {
    auto& exchange = std::get<ops::PipeExchange>(ops.back().args);
    if (exchange.next == next && exchange.recv < 0) {
      exchange.recv = out;
      ops.back().name += "_recv";
      return out;
    }
  }
  op(name + ".recv", ops::PipeExchange{.recv = out, .next = next});
  return out;
}

void GraphBuilder::end_first_forward() {
  if (first_forward_ended_) return;
  first_forward_ended_ = true;
  m_.graph.forward_end = static_cast<int>(m_.graph.ops.size());
}

int GraphBuilder::param(const std::string& name, std::vector<int64_t> shape) {
  const Category c = trains_base_param(step_.lora, name) ? Category::params : Category::frozen;
  const int id = m_.graph.table.add(
      {.name = name, .shape = std::move(shape), .dtype = step_.dtype, .category = c, .block = block_});
  m_.params.push_back(id);
  return id;
}

int GraphBuilder::param(const std::string& name, TensorShard shard) {
  std::vector<int64_t> shape = shard.whole;
  shape[static_cast<size_t>(shard.dim)] = 0;
  for (const auto& range : shard.ranges) shape[static_cast<size_t>(shard.dim)] += range.second;
  const int id = param(name, std::move(shape));
  if (step_.tp > 1) m_.graph.table[id].shard = std::move(shard);
  return id;
}

TensorShard GraphBuilder::shard(std::vector<int64_t> whole, int dim,
                                const std::vector<int64_t>& parts) const {
  TensorShard s{.whole = std::move(whole), .dim = dim, .ranges = {}};
  int64_t start = 0;
  for (int64_t part : parts) {
    const int64_t width = part / step_.tp;
    s.ranges.emplace_back(start + step_.tp_rank * width, width);
    start += part;
  }
  return s;
}

void GraphBuilder::all_reduce(const std::string& name, int data) {
  if (step_.tp > 1) op(name + ".all_reduce", ops::AllReduce{.data = data});
}

int GraphBuilder::residual_act(std::string name, int64_t width) {
  if (!sequence_parallel()) return act(std::move(name), width);
  return act(std::move(name), {step_.batch * step_.seq_len / step_.tp, width});
}

int GraphBuilder::gathered(const std::string& name, int shard) {
  if (!sequence_parallel()) return shard;
  const int whole = act(name, m_.graph.table[shard].shape.back());
  op(name + ".all_gather", ops::AllGather{.inp = shard, .out = whole});
  return whole;
}

int GraphBuilder::partial_sum(const std::string& name, int out) {
  return sequence_parallel() ? act(name, m_.graph.table[out].shape.back()) : out;
}

void GraphBuilder::sum_partials(const std::string& name, int partial, int out) {
  if (sequence_parallel())
    op(name + ".reduce_scatter", ops::ReduceScatter{.inp = partial, .out = out});
  else
    all_reduce(name, out);
}

LoraAdapter GraphBuilder::lora_adapter(const std::string& module, int64_t in, int64_t width, int64_t column) {
  const int64_t r = step_.lora.rank;
  LoraAdapter adapter{.column = column};
  for (auto [id, name, shape] : {std::tuple{&adapter.a, lora_a_name(module), std::vector{r, in}},
                                 std::tuple{&adapter.b, lora_b_name(module), std::vector{width, r}}}) {
    *id = m_.graph.table.add(
        {.name = name, .shape = shape, .dtype = step_.dtype, .category = Category::params, .block = block_});
    m_.params.push_back(*id);
  }
  return adapter;
}

int GraphBuilder::lora_dropped(const std::string& name, int inp) {
  if (step_.lora.dropout <= 0) return -1;
  const TensorDesc& x = m_.graph.table[inp];
  return tensor(name, x.shape, Category::workspace, x.dtype);
}

// Keyed by the module, not the op: a recomputed forward and the backward draw the forward's mask.
ops::LoraDropout GraphBuilder::lora_dropout(const std::string& module) const {
  return {.p = step_.lora.dropout, .seed = step_.seed, .stream = hash_name(module + ".lora_dropout")};
}

std::string GraphBuilder::adapter_module(const LoraAdapter& adapter) const {
  const std::string& a = m_.graph.table[adapter.a].name;
  return a.substr(0, a.size() - lora_a_name("").size());
}

int GraphBuilder::tensor(std::string name, std::vector<int64_t> shape, Category c, DType dtype) {
  if (c == Category::activations || c == Category::workspace) name += name_suffix_;  // per micro-batch
  return m_.graph.table.add({std::move(name), std::move(shape), dtype, c});
}

int GraphBuilder::act(std::string name, std::vector<int64_t> shape) {
  return tensor(std::move(name), std::move(shape), Category::activations, step_.dtype);
}

int GraphBuilder::stat(std::string name, std::vector<int64_t> shape) {
  return tensor(std::move(name), std::move(shape), Category::activations, DType::f32);
}

int GraphBuilder::scratch(std::string name, int64_t floats) {
  return tensor(std::move(name), {floats}, Category::workspace, DType::f32);
}

int GraphBuilder::dequant_tile(const std::string& name, int weight) {
  const TensorDesc& w = m_.graph.table[weight];
  if (!step_.base_quant.enabled() || w.category != Category::frozen) return -1;
  // A tile of whole columns, each as long as the longer side (either layout's rows or columns).
  return tensor(name + ".dequant_tile",
                {step_.device.dequant_tile_columns * std::max(w.shape[0], w.shape[1])}, Category::workspace,
                step_.dtype);
}

void GraphBuilder::op(std::string name, OpArgs args) {
  m_.graph.ops.push_back({.name = std::move(name) + name_suffix_, .args = std::move(args)});
}

LoraActs GraphBuilder::linear(const std::string& name, const std::string& suffix, int inp, int out,
                              int residual, const LinearParams& p, bool out_in) {
  // A residual shard (sequence parallel) goes into this rank's rows of the whole partial sum.
  const TensorTable& table = m_.graph.table;
  const int64_t residual_row = residual >= 0 && table[residual].numel() < table[out].numel()
                                   ? step_.tp_rank * (table[residual].numel() / table[out].shape.back())
                                   : 0;
  op(name + suffix, ops::Linear{.inp = inp,
                                .out = out,
                                .residual = residual,
                                .weight = p.weight,
                                .bias = p.bias,
                                .matmul_scratch = mm_,
                                .dequant_tile = dequant_tile(name + suffix, p.weight),
                                .weight_out_in = out_in,
                                .residual_row = residual_row});
  LoraActs hidden;
  for (const LoraAdapter& adapter : p.adapters) {
    const std::string module = adapter_module(adapter);
    hidden.push_back(act(module + ".lora.hidden" + suffix, step_.lora.rank));
    op(module + ".lora" + suffix, ops::Lora{.inp = inp,
                                            .out = out,
                                            .a = adapter.a,
                                            .b = adapter.b,
                                            .hidden = hidden.back(),
                                            .matmul_scratch = mm_,
                                            .dropped = lora_dropped(module + ".lora.dropped" + suffix, inp),
                                            .column = adapter.column,
                                            .scale = step_.lora.scaling(),
                                            .dropout = lora_dropout(module)});
  }
  return hidden;
}

void GraphBuilder::linear_backward(const std::string& name, int inp, const LinearParams& p,
                                   const LoraActs& lora, int dinp, int dout, bool out_in) {
  op(name, ops::LinearBackward{.inp = inp,
                               .weight = p.weight,
                               .bias = p.bias,
                               .dinp = dinp,
                               .dout = dout,
                               .matmul_scratch = mm_,
                               .dequant_tile = dequant_tile(name, p.weight),
                               .weight_out_in = out_in});
  for (size_t i = 0; i < p.adapters.size(); ++i) {
    const LoraAdapter& adapter = p.adapters[i];
    const std::string module = adapter_module(adapter);
    const int grad_hidden =
        tensor(module + ".lora.hidden.grad", {step_.batch * step_.seq_len, step_.lora.rank},
               Category::workspace, step_.dtype);
    op(module + ".lora.backward",
       ops::LoraBackward{.inp = inp,
                         .a = adapter.a,
                         .b = adapter.b,
                         .hidden = lora[i],
                         .dinp = dinp,
                         .dout = dout,
                         .grad_hidden = grad_hidden,
                         .matmul_scratch = mm_,
                         .dropped = lora_dropped(module + ".lora.dropped.grad", inp),
                         .column = adapter.column,
                         .scale = step_.lora.scaling(),
                         .dropout = lora_dropout(module)});
  }
}

NormActs GraphBuilder::norm(NormKind kind, const std::string& name, const std::string& suffix, int inp,
                            NormParams p, int64_t width) {
  // Under sequence parallelism the norms see this rank's tokens only.
  const std::vector<int64_t> rows = sequence_parallel() ? std::vector{step_.batch * step_.seq_len / step_.tp}
                                                        : std::vector{step_.batch, step_.seq_len};
  NormActs a;
  a.out = residual_act(name + ".out" + suffix, width);
  if (kind == NormKind::layernorm) {
    a.mean = stat(name + ".mean" + suffix, rows);
    a.rstd = stat(name + ".rstd" + suffix, rows);
    op(name + suffix,
       ops::LayerNorm{
           .inp = inp, .out = a.out, .weight = p.weight, .bias = p.bias, .mean = a.mean, .rstd = a.rstd});
  } else {
    a.rstd = stat(name + ".rstd" + suffix, rows);
    op(name + suffix, ops::RmsNorm{.inp = inp, .out = a.out, .weight = p.weight, .rstd = a.rstd});
  }
  return a;
}

void GraphBuilder::norm_backward(NormKind kind, const std::string& name, int inp, NormParams p,
                                 const NormActs& acts, int dinp, int dout) {
  // Each rank's norm sees its own tokens: the step sums the norm's gradients over the ranks.
  if (sequence_parallel())
    for (int param : {p.weight, p.bias})
      if (param >= 0) m_.graph.table[param].grad_summed_over_tp = true;
  if (kind == NormKind::layernorm)
    op(name, ops::LayerNormBackward{.inp = inp,
                                    .weight = p.weight,
                                    .bias = p.bias,
                                    .mean = acts.mean,
                                    .rstd = acts.rstd,
                                    .dinp = dinp,
                                    .dout = dout});
  else
    op(name,
       ops::RmsNormBackward{.inp = inp, .weight = p.weight, .rstd = acts.rstd, .dinp = dinp, .dout = dout});
}

void GraphBuilder::attention(const std::string& name, const std::string& suffix, int qkv, int out, int lse,
                             int64_t scratch_floats) {
  const int s = scratch(name + ".scratch" + suffix, scratch_floats);
  op(name + suffix,
     ops::Attention{.qkv = qkv, .out = out, .lse = lse, .scratch = s, .positions = batch().positions});
}

void GraphBuilder::attention_backward(const std::string& name, int qkv, int out, int lse, int dqkv, int dout,
                                      int64_t scratch_floats) {
  const int s = scratch(name + ".scratch", scratch_floats);
  op(name, ops::AttentionBackward{.qkv = qkv,
                                  .out = out,
                                  .lse = lse,
                                  .dqkv = dqkv,
                                  .dout = dout,
                                  .scratch = s,
                                  .positions = batch().positions});
}

int GraphBuilder::activation(Activation kind, const std::string& name, const std::string& suffix, int inp,
                             int64_t width) {
  const int out = act(name + suffix + ".out", width);
  if (kind == Activation::gelu)
    op(name + suffix, ops::Gelu{.inp = inp, .out = out});
  else
    op(name + suffix, ops::Swiglu{.gate_up = inp, .out = out});
  return out;
}

void GraphBuilder::activation_backward(Activation kind, const std::string& name, int inp, int dinp,
                                       int dout) {
  if (kind == Activation::gelu)
    op(name, ops::GeluBackward{.inp = inp, .dinp = dinp, .dout = dout});
  else
    op(name, ops::SwigluBackward{.gate_up = inp, .dgate_up = dinp, .dout = dout});
}

int GraphBuilder::lm_head_loss(int inp, int weight, int64_t C, int64_t Vp, int64_t vocab_begin) {
  const int64_t B = step_.batch, T = step_.seq_len;
  const int dinp = act(m_.graph.table[inp].name + ".grad", C);
  const int64_t rows = std::min(B * T, kLogitsChunkRows), chunk = rows * Vp;
  const int losses = scratch("lm_head.losses", B * T);
  const int logits = scratch("lm_head.logits", chunk);
  const int logits_grad = step_.dtype == DType::f32
                              ? -1
                              : tensor("lm_head.logits.grad", {chunk}, Category::workspace, step_.dtype);
  const int row_stats = step_.tp > 1 ? scratch("lm_head.row_stats", step_.tp * 3 * rows) : -1;
  if (micro_batch_ == 0) {
    m_.graph.loss_op = static_cast<int>(m_.graph.ops.size());
    m_.graph.loss_sum = tensor("loss.sum", {1}, Category::other, DType::f64);
  }
  op("lm_head", ops::LmHeadLoss{.inp = inp,
                                .weight = weight,
                                .losses = losses,
                                .dinp = dinp,
                                .logits = logits,
                                .logits_grad = logits_grad,
                                .matmul_scratch = mm_,
                                .targets = batch().targets,
                                .loss_mask = batch().loss_mask,
                                .row_stats = row_stats,
                                .loss_sum = m_.graph.loss_sum,
                                .vocab_begin = vocab_begin});
  return dinp;
}

void GraphBuilder::finish() {
  assign_lifetimes(m_.graph);
}

}  // namespace mt
