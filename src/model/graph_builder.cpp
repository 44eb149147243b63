#include "model/graph_builder.h"

#include <omp.h>

#include <algorithm>

#include "backend/cpu/attention.h"
#include "backend/cpu/matmul.h"

namespace mt {

GraphBuilder::GraphBuilder(ModelGraph& model, const StepConfig& step) : m_(model), step_(step) {
  if (step_.threads <= 0) step_.threads = omp_get_max_threads();
  m_.graph.threads = step_.threads;
  // Matrix products whose inputs the library cannot take directly get conversion tiles (f16 on most CPUs,
  // bf16 without AVX512-BF16).
  const int64_t matmul_floats = kernels::gemm_scratch_floats(step_.dtype, step_.isa, step_.threads);
  if (matmul_floats > 0) mm_ = scratch("matmul.scratch", matmul_floats);
  m_.tokens = tensor("batch.tokens", {step_.batch, step_.seq_len}, Category::other, DType::i32);
  m_.targets = tensor("batch.targets", {step_.batch, step_.seq_len}, Category::other, DType::i32);
}

int GraphBuilder::param(const std::string& name, std::vector<int64_t> shape) {
  const int id = m_.graph.table.add({.name = name,
                                     .shape = std::move(shape),
                                     .dtype = step_.dtype,
                                     .category = Category::params,
                                     .block = block_});
  m_.params.push_back(id);
  return id;
}

int GraphBuilder::tensor(const std::string& name, std::vector<int64_t> shape, Category c, DType dtype) {
  return m_.graph.table.add({name, std::move(shape), dtype, c});
}

int GraphBuilder::act(const std::string& name, std::vector<int64_t> shape) {
  return tensor(name, std::move(shape), Category::activations, step_.dtype);
}

int GraphBuilder::stat(const std::string& name, std::vector<int64_t> shape) {
  return tensor(name, std::move(shape), Category::activations, DType::f32);
}

int GraphBuilder::scratch(const std::string& name, int64_t floats) {
  return tensor(name, {floats}, Category::workspace, DType::f32);
}

void GraphBuilder::op(std::string name, OpArgs args) {
  m_.graph.ops.push_back({.name = std::move(name), .args = std::move(args)});
}

void GraphBuilder::linear(const std::string& name, int inp, int out, int residual, LinearParams p,
                          bool out_in) {
  op(name, ops::Linear{.inp = inp,
                       .out = out,
                       .residual = residual,
                       .weight = p.weight,
                       .bias = p.bias,
                       .matmul_scratch = mm_,
                       .weight_out_in = out_in});
}

void GraphBuilder::linear_backward(const std::string& name, int inp, LinearParams p, int dinp, int dout,
                                   bool out_in) {
  op(name, ops::LinearBackward{.inp = inp,
                               .weight = p.weight,
                               .bias = p.bias,
                               .dinp = dinp,
                               .dout = dout,
                               .matmul_scratch = mm_,
                               .weight_out_in = out_in});
}

NormActs GraphBuilder::norm(NormKind kind, const std::string& name, const std::string& suffix, int inp,
                            NormParams p, int64_t width) {
  const std::vector<int64_t> rows = {step_.batch, step_.seq_len};
  NormActs a;
  a.out = act(name + ".out" + suffix, width);
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
  op(name + suffix, ops::Attention{.qkv = qkv, .out = out, .lse = lse, .scratch = s});
}

void GraphBuilder::attention_backward(const std::string& name, int qkv, int out, int lse, int dqkv, int dout,
                                      int64_t scratch_floats) {
  const int s = scratch(name + ".scratch", scratch_floats);
  op(name,
     ops::AttentionBackward{.qkv = qkv, .out = out, .lse = lse, .dqkv = dqkv, .dout = dout, .scratch = s});
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

int GraphBuilder::lm_head_loss(int inp, int weight, int64_t C, int64_t Vp) {
  const int64_t B = step_.batch, T = step_.seq_len;
  const int dinp = act(m_.graph.table[inp].name + ".grad", C);
  const int64_t chunk = std::min(B * T, kLogitsChunkRows) * Vp;
  const int losses = scratch("lm_head.losses", B * T);
  const int logits = scratch("lm_head.logits", chunk);
  const int logits_grad = step_.dtype == DType::f32
                              ? -1
                              : tensor("lm_head.logits.grad", {chunk}, Category::workspace, step_.dtype);
  m_.graph.loss_op = static_cast<int>(m_.graph.ops.size());
  op("lm_head", ops::LmHeadLoss{.inp = inp,
                                .weight = weight,
                                .losses = losses,
                                .dinp = dinp,
                                .logits = logits,
                                .logits_grad = logits_grad,
                                .matmul_scratch = mm_,
                                .targets = m_.targets});
  return dinp;
}

void GraphBuilder::finish() {
  assign_lifetimes(m_.graph);
}

TransformerBlocks::TransformerBlocks(GraphBuilder& b, const ModelSpec& spec, BlockFamily family,
                                     std::vector<LayerParams> params)
    : b_(b),
      family_(std::move(family)),
      params_(std::move(params)),
      C_(spec.n_embd),
      NH_(spec.n_head),
      attn_scratch_(kernels::attention_scratch_floats(b.step().seq_len, spec.head_dim(), b.step().threads,
                                                      b.step().dtype)),
      acts_(params_.size()) {}

int64_t TransformerBlocks::up_width() const {
  return family_.activation == Activation::swiglu ? 2 * family_.mlp_width : family_.mlp_width;
}

int TransformerBlocks::forward(int inp) {
  inputs_.assign(params_.size(), -1);
  for (size_t l = 0; l < params_.size(); ++l) {
    inputs_[l] = inp;
    inp = layer_forward(static_cast<int64_t>(l), inp, "");
  }
  return inp;
}

void TransformerBlocks::backward(int dres) {
  const StepConfig& step = b_.step();
  const int64_t n_layer = static_cast<int64_t>(params_.size());
  const std::vector<int64_t> group = full_recompute_groups(step.recompute, n_layer);
  const bool selective = step.recompute.granularity == RecomputeGranularity::selective;
  for (int64_t l = n_layer - 1; l >= 0; --l) {
    // Entering a recompute group from its top: rerun the group's forward from the input it kept.
    if (group[l] >= 0 && (l == n_layer - 1 || group[l + 1] != group[l])) {
      int inp = inputs_[group[l]];
      for (int64_t r = group[l]; r <= l; ++r) inp = layer_forward(r, inp, ".recomputed");
    }
    layer_backward(l, dres, selective);
  }
}

int TransformerBlocks::layer_forward(int64_t l, int inp, const std::string& suffix) {
  const BlockFamily& f = family_;
  const LayerParams& p = params_[l];
  const std::string h = prefix(l), attn = h + f.attention;
  const int64_t B = b_.step().batch, T = b_.step().seq_len;
  LayerActs& a = acts_[l];
  a.inp = inp;
  a.qkv = b_.act(attn + ".qkv" + suffix, f.qkv_width);
  a.atty = b_.act(attn + ".out" + suffix, C_);
  a.lse = b_.stat(attn + ".lse" + suffix, {B, NH_, T});
  a.res2 = b_.act(attn + ".residual" + suffix, C_);
  a.up = b_.act(h + f.up_out + suffix, up_width());
  a.out = b_.act(h + "out" + suffix, C_);
  a.norm1 = b_.norm(f.norm, h + f.norm1, suffix, a.inp, p.norm1, C_);
  b_.linear(h + f.qkv_proj + suffix, a.norm1.out, a.qkv, -1, p.qkv, f.weight_out_in);
  if (f.rope) b_.op(attn + ".rope" + suffix, ops::Rope{.qkv = a.qkv});
  b_.attention(attn, suffix, a.qkv, a.atty, a.lse, attn_scratch_);
  b_.linear(h + f.out_proj + suffix, a.atty, a.res2, a.inp, p.out, f.weight_out_in);
  a.norm2 = b_.norm(f.norm, h + f.norm2, suffix, a.res2, p.norm2, C_);
  b_.linear(h + f.up_proj + suffix, a.norm2.out, a.up, -1, p.up, f.weight_out_in);
  a.act = b_.activation(f.activation, h + f.activation_name, suffix, a.up, f.mlp_width);
  b_.linear(h + f.down_proj + suffix, a.act, a.out, a.res2, p.down, f.weight_out_in);
  return a.out;
}

void TransformerBlocks::layer_backward(int64_t l, int dres, bool selective) {
  const BlockFamily& f = family_;
  const LayerParams& p = params_[l];
  LayerActs& a = acts_[l];
  const std::string h = prefix(l), attn = h + f.attention, re = ".recomputed";
  const std::string activation = h + f.activation_name;
  // GELU's backward runs in place on the gradient of its input; SwiGLU's has one of each width.
  const bool in_place = f.activation == Activation::gelu;
  const int dact = b_.act(in_place ? h + f.up_out + ".grad" : activation + ".out.grad", f.mlp_width);
  const int dup = in_place ? dact : b_.act(h + f.up_out + ".grad", up_width());
  const int dnorm2 = b_.act(h + f.norm2 + ".out.grad", C_);
  const int datty = b_.act(attn + ".out.grad", C_);
  const int dqkv = b_.act(attn + ".qkv.grad", f.qkv_width);
  const int dnorm1 = b_.act(h + f.norm1 + ".out.grad", C_);
  if (selective) a.act = b_.activation(f.activation, activation, re, a.up, f.mlp_width);
  b_.linear_backward(h + f.down_proj + ".backward", a.act, p.down, dact, dres, f.weight_out_in);
  b_.activation_backward(f.activation, activation + ".backward", a.up, dup, dact);
  if (selective) a.norm2 = b_.norm(f.norm, h + f.norm2, re, a.res2, p.norm2, C_);
  b_.linear_backward(h + f.up_proj + ".backward", a.norm2.out, p.up, dnorm2, dup, f.weight_out_in);
  b_.norm_backward(f.norm, h + f.norm2 + ".backward", a.res2, p.norm2, a.norm2, dres, dnorm2);
  b_.linear_backward(h + f.out_proj + ".backward", a.atty, p.out, datty, dres, f.weight_out_in);
  b_.attention_backward(attn + ".backward", a.qkv, a.atty, a.lse, dqkv, datty, attn_scratch_);
  if (f.rope) b_.op(attn + ".rope.backward", ops::RopeBackward{.dqkv = dqkv});
  if (selective) a.norm1 = b_.norm(f.norm, h + f.norm1, re, a.inp, p.norm1, C_);
  b_.linear_backward(h + f.qkv_proj + ".backward", a.norm1.out, p.qkv, dnorm1, dqkv, f.weight_out_in);
  b_.norm_backward(f.norm, h + f.norm1 + ".backward", a.inp, p.norm1, a.norm1, dres, dnorm1);
}

void emit_step(GraphBuilder& b, TransformerBlocks& blocks, const ModelSpec& spec, NormKind norm,
               const StepParams& p) {
  const int64_t C = spec.n_embd;
  const int tokens = b.model().tokens;
  const int embedded = b.act(p.embed_out, C);
  b.op("embed", ops::Embedding{.out = embedded, .wte = p.wte, .wpe = p.wpe, .tokens = tokens});
  const int residual = blocks.forward(embedded);
  const NormActs normed = b.norm(norm, p.final_norm_name, "", residual, p.final_norm, C);
  const int dnormed = b.lm_head_loss(normed.out, p.head, C, spec.padded_vocab_size);

  // Backward. One residual-stream gradient accumulates through every block, in place.
  const int dres = b.act("residual.grad", C);
  b.op("residual.grad.zero", ops::Zero{.out = dres});
  b.norm_backward(norm, p.final_norm_name + ".backward", residual, p.final_norm, normed, dres, dnormed);
  blocks.backward(dres);
  b.op("embed.backward", ops::EmbeddingBackward{.wte = p.wte, .wpe = p.wpe, .dout = dres, .tokens = tokens});
  b.finish();
}

}  // namespace mt
