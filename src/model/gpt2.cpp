#include "model/gpt2.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "model/recompute.h"

namespace mt {

namespace {

// Builds the table and the op list side by side; names follow Hugging Face GPT-2 for parameters.
// Tensors in the compute dtype unless they are statistics (fp32 for accuracy) or fp32 scratch.
class Builder {
 public:
  Builder(Graph& g, DType dtype) : g_(g), dtype_(dtype) {}

  // Parameters from here on belong to a new block (see TensorDesc::block).
  void begin_block() { ++block_; }
  int param(const std::string& name, std::vector<int64_t> shape) {
    return g_.table.add({.name = name,
                         .shape = std::move(shape),
                         .dtype = dtype_,
                         .category = Category::params,
                         .block = block_});
  }
  int tensor(const std::string& name, std::vector<int64_t> shape, Category c, DType dtype) {
    return g_.table.add({name, std::move(shape), dtype, c});
  }
  int act(const std::string& name, std::vector<int64_t> shape) {
    return tensor(name, std::move(shape), Category::activations, dtype_);
  }
  int stat(const std::string& name, std::vector<int64_t> shape) {
    return tensor(name, std::move(shape), Category::activations, DType::f32);
  }
  int scratch(const std::string& name, int64_t floats) {
    return tensor(name, {floats}, Category::workspace, DType::f32);
  }
  void op(Op o) { g_.ops.push_back(std::move(o)); }

 private:
  Graph& g_;
  DType dtype_;
  int block_ = 0;
};

struct LayerParams {
  int ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
};

struct LayerActs {
  int inp, ln1, ln1_mean, ln1_rstd, qkv, atty, lse, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, out;
};

// Emits the ops of one block, forward and backward. A forward emitted a second time (full recompute) or a
// selective recompute creates new tensors named with a ".recomputed" suffix: the Plan sees them as tensors
// of their own, alive from the recompute to their last backward use.
class LayerEmitter {
 public:
  LayerEmitter(Builder& b, const StepConfig& step, int64_t C, int64_t NH, int matmul_scratch)
      : b_(b),
        B_(step.batch),
        T_(step.seq_len),
        C_(C),
        NH_(NH),
        mm_(matmul_scratch),
        attn_scratch_(kernels::attention_scratch_floats(step.seq_len, C / NH, step.threads, step.dtype)) {}

  LayerActs forward(const LayerParams& p, int inp, const std::string& h, const std::string& suffix) {
    LayerActs a;
    a.inp = inp;
    a.qkv = act(h + "attn.qkv" + suffix, 3 * C_);
    a.atty = act(h + "attn.out" + suffix, C_);
    a.lse = b_.stat(h + "attn.lse" + suffix, {B_, NH_, T_});
    a.res2 = act(h + "attn.residual" + suffix, C_);
    a.fch = act(h + "mlp.fc" + suffix, 4 * C_);
    a.out = act(h + "out" + suffix, C_);
    layernorm(h + "ln_1", suffix, a.inp, p.ln1_w, p.ln1_b, a.ln1, a.ln1_mean, a.ln1_rstd);
    linear(h + "attn.c_attn" + suffix, a.ln1, a.qkv, -1, p.attn_w, p.attn_b);
    b_.op({.kind = OpKind::attention,
           .name = h + "attn" + suffix,
           .inp = a.qkv,
           .out = a.atty,
           .stat0 = a.lse,
           .scratch = b_.scratch(h + "attn.scratch" + suffix, attn_scratch_)});
    linear(h + "attn.c_proj" + suffix, a.atty, a.res2, a.inp, p.proj_w, p.proj_b);
    layernorm(h + "ln_2", suffix, a.res2, p.ln2_w, p.ln2_b, a.ln2, a.ln2_mean, a.ln2_rstd);
    linear(h + "mlp.c_fc" + suffix, a.ln2, a.fch, -1, p.fc_w, p.fc_b);
    gelu(h + "mlp.gelu" + suffix, a.fch, a.fch_gelu);
    linear(h + "mlp.c_proj" + suffix, a.fch_gelu, a.out, a.res2, p.fcproj_w, p.fcproj_b);
    return a;
  }

  // The block's backward; the residual-stream gradient dres flows through in place. With `selective`, the
  // LayerNorm and GELU outputs are recomputed right before the op that needs them.
  void backward(const LayerParams& p, LayerActs a, int dres, const std::string& h, bool selective) {
    const std::string re = ".recomputed";
    const int dfch = act(h + "mlp.fc.grad", 4 * C_);
    const int dln2 = act(h + "ln_2.out.grad", C_);
    const int datty = act(h + "attn.out.grad", C_);
    const int dqkv = act(h + "attn.qkv.grad", 3 * C_);
    const int dln1 = act(h + "ln_1.out.grad", C_);
    if (selective) gelu(h + "mlp.gelu" + re, a.fch, a.fch_gelu);
    linear_backward(h + "mlp.c_proj.backward", a.fch_gelu, p.fcproj_w, p.fcproj_b, dfch, dres);
    b_.op({.kind = OpKind::gelu_backward,
           .name = h + "mlp.gelu.backward",
           .inp = a.fch,
           .dinp = dfch,
           .dout = dfch});
    if (selective) layernorm(h + "ln_2", re, a.res2, p.ln2_w, p.ln2_b, a.ln2, a.ln2_mean, a.ln2_rstd);
    linear_backward(h + "mlp.c_fc.backward", a.ln2, p.fc_w, p.fc_b, dln2, dfch);
    layernorm_backward(h + "ln_2.backward", a.res2, p.ln2_w, p.ln2_b, a.ln2_mean, a.ln2_rstd, dres, dln2);
    linear_backward(h + "attn.c_proj.backward", a.atty, p.proj_w, p.proj_b, datty, dres);
    b_.op({.kind = OpKind::attention_backward,
           .name = h + "attn.backward",
           .inp = a.qkv,
           .out = a.atty,
           .stat0 = a.lse,
           .dinp = dqkv,
           .dout = datty,
           .scratch = b_.scratch(h + "attn.backward.scratch", attn_scratch_)});
    if (selective) layernorm(h + "ln_1", re, a.inp, p.ln1_w, p.ln1_b, a.ln1, a.ln1_mean, a.ln1_rstd);
    linear_backward(h + "attn.c_attn.backward", a.ln1, p.attn_w, p.attn_b, dln1, dqkv);
    layernorm_backward(h + "ln_1.backward", a.inp, p.ln1_w, p.ln1_b, a.ln1_mean, a.ln1_rstd, dres, dln1);
  }

  void layernorm_backward(const std::string& name, int inp, int w, int bias, int mean, int rstd, int dinp,
                          int dout) {
    b_.op({.kind = OpKind::layernorm_backward,
           .name = name,
           .inp = inp,
           .weight = w,
           .bias = bias,
           .stat0 = mean,
           .stat1 = rstd,
           .dinp = dinp,
           .dout = dout});
  }

 private:
  int act(const std::string& name, int64_t width) { return b_.act(name, {B_, T_, width}); }

  // A LayerNorm into new output and statistics tensors (returned through out, mean, rstd).
  void layernorm(const std::string& name, const std::string& suffix, int inp, int w, int bias, int& out,
                 int& mean, int& rstd) {
    out = act(name + ".out" + suffix, C_);
    mean = b_.stat(name + ".mean" + suffix, {B_, T_});
    rstd = b_.stat(name + ".rstd" + suffix, {B_, T_});
    b_.op({.kind = OpKind::layernorm,
           .name = name + suffix,
           .inp = inp,
           .out = out,
           .weight = w,
           .bias = bias,
           .stat0 = mean,
           .stat1 = rstd});
  }

  void gelu(const std::string& name, int inp, int& out) {
    out = act(name + ".out", 4 * C_);
    b_.op({.kind = OpKind::gelu, .name = name, .inp = inp, .out = out});
  }

  void linear(const std::string& name, int inp, int out, int residual, int w, int bias) {
    b_.op({.kind = OpKind::linear,
           .name = name,
           .inp = inp,
           .out = out,
           .residual = residual,
           .weight = w,
           .bias = bias,
           .matmul_scratch = mm_});
  }

  void linear_backward(const std::string& name, int inp, int w, int bias, int dinp, int dout) {
    b_.op({.kind = OpKind::linear_backward,
           .name = name,
           .inp = inp,
           .weight = w,
           .bias = bias,
           .dinp = dinp,
           .dout = dout,
           .matmul_scratch = mm_});
  }

  Builder& b_;
  int64_t B_, T_, C_, NH_;
  int mm_;
  int64_t attn_scratch_;
};

}  // namespace

Gpt2Graph build_gpt2_graph(const ModelSpec& spec, const StepConfig& config) {
  StepConfig step = config;
  if (step.threads <= 0) step.threads = omp_get_max_threads();
  const int64_t B = step.batch, T = step.seq_len, C = spec.n_embd, L = spec.n_layer;
  const int64_t Vp = spec.padded_vocab_size;
  const std::vector<int64_t> group = full_recompute_groups(step.recompute, L);
  const bool selective = step.recompute.granularity == RecomputeGranularity::selective;
  Gpt2Graph m;
  Graph& g = m.graph;
  g.threads = step.threads;
  Builder b(g, step.dtype);
  // Matrix products whose inputs the library cannot take directly get conversion tiles (f16 on most CPUs).
  const int64_t matmul_floats = kernels::gemm_scratch_floats(step.dtype);
  const int mm = matmul_floats > 0 ? b.scratch("matmul.scratch", matmul_floats) : -1;
  LayerEmitter layers(b, step, C, spec.n_head, mm);

  m.tokens = b.tensor("batch.tokens", {B, T}, Category::other, DType::i32);
  m.targets = b.tensor("batch.targets", {B, T}, Category::other, DType::i32);

  const int wte = b.param("wte.weight", {Vp, C});
  const int wpe = b.param("wpe.weight", {spec.n_positions, C});
  m.params = {wte, wpe};
  std::vector<LayerParams> lp(L);
  for (int64_t l = 0; l < L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    b.begin_block();
    lp[l] = {b.param(h + "ln_1.weight", {C}),
             b.param(h + "ln_1.bias", {C}),
             b.param(h + "attn.c_attn.weight", {C, 3 * C}),
             b.param(h + "attn.c_attn.bias", {3 * C}),
             b.param(h + "attn.c_proj.weight", {C, C}),
             b.param(h + "attn.c_proj.bias", {C}),
             b.param(h + "ln_2.weight", {C}),
             b.param(h + "ln_2.bias", {C}),
             b.param(h + "mlp.c_fc.weight", {C, 4 * C}),
             b.param(h + "mlp.c_fc.bias", {4 * C}),
             b.param(h + "mlp.c_proj.weight", {4 * C, C}),
             b.param(h + "mlp.c_proj.bias", {C})};
    const LayerParams& p = lp[l];
    m.params.insert(m.params.end(), {p.ln1_w, p.ln1_b, p.attn_w, p.attn_b, p.proj_w, p.proj_b, p.ln2_w,
                                     p.ln2_b, p.fc_w, p.fc_b, p.fcproj_w, p.fcproj_b});
  }
  b.begin_block();
  const int lnf_w = b.param("ln_f.weight", {C}), lnf_b = b.param("ln_f.bias", {C});
  m.params.insert(m.params.end(), {lnf_w, lnf_b});

  // Forward. Each layer's output is the next layer's input: the residual stream is never copied.
  int residual = b.act("embed.out", {B, T, C});
  b.op({.kind = OpKind::embedding,
        .name = "embed",
        .out = residual,
        .weight = wte,
        .bias = wpe,
        .labels = m.tokens});
  std::vector<LayerActs> la(L);
  for (int64_t l = 0; l < L; ++l) {
    la[l] = layers.forward(lp[l], residual, "h." + std::to_string(l) + ".", "");
    residual = la[l].out;
  }
  const int lnf = b.act("ln_f.out", {B, T, C});
  const int lnf_mean = b.stat("ln_f.mean", {B, T}), lnf_rstd = b.stat("ln_f.rstd", {B, T});
  b.op({.kind = OpKind::layernorm,
        .name = "ln_f",
        .inp = residual,
        .out = lnf,
        .weight = lnf_w,
        .bias = lnf_b,
        .stat0 = lnf_mean,
        .stat1 = lnf_rstd});

  // The LM head is tied to wte. Its logits exist one chunk of rows at a time, and the loss's gradient is
  // taken inside the same op, so the step never holds [B*T, Vp] logits. In 16-bit runs the loss gradient is
  // rounded into its own chunk buffer for the products that follow.
  const int dlnf = b.act("ln_f.out.grad", {B, T, C});
  const int64_t chunk = std::min(B * T, kLogitsChunkRows) * Vp;
  g.loss_op = static_cast<int>(g.ops.size());
  b.op({.kind = OpKind::lm_head_loss,
        .name = "lm_head",
        .inp = lnf,
        .weight = wte,
        .stat0 = b.scratch("lm_head.losses", B * T),
        .dinp = dlnf,
        .scratch = b.scratch("lm_head.logits", chunk),
        .dscratch = step.dtype == DType::f32
                        ? -1
                        : b.tensor("lm_head.logits.grad", {chunk}, Category::workspace, step.dtype),
        .matmul_scratch = mm,
        .labels = m.targets});

  // Backward. One residual-stream gradient accumulates through every block, in place.
  const int dres = b.act("residual.grad", {B, T, C});
  b.op({.kind = OpKind::zero, .name = "residual.grad.zero", .out = dres});
  layers.layernorm_backward("ln_f.backward", residual, lnf_w, lnf_b, lnf_mean, lnf_rstd, dres, dlnf);
  for (int64_t l = L - 1; l >= 0; --l) {
    // Entering a recompute group from its top: rerun the group's forward from the input it kept.
    if (group[l] >= 0 && (l == L - 1 || group[l + 1] != group[l])) {
      int inp = la[group[l]].inp;
      for (int64_t r = group[l]; r <= l; ++r) {
        la[r] = layers.forward(lp[r], inp, "h." + std::to_string(r) + ".", ".recomputed");
        inp = la[r].out;
      }
    }
    layers.backward(lp[l], la[l], dres, "h." + std::to_string(l) + ".", selective);
  }
  b.op({.kind = OpKind::embedding_backward,
        .name = "embed.backward",
        .weight = wte,
        .bias = wpe,
        .dout = dres,
        .labels = m.tokens});
  assign_lifetimes(g);
  return m;
}

bool gpt2_decays(const TensorDesc& param) {
  return param.shape.size() == 2;
}

namespace {

// One tensor's initial value at element i, in fp32: a pure function of (seed, name, i).
class InitialValues {
 public:
  InitialValues(const TensorDesc& t, const ModelSpec& spec, uint64_t seed)
      : seed_(seed), stream_(hash_name(t.name)) {
    if (t.name.ends_with(".bias")) {
      constant_ = 0.0f;
    } else if (t.name.find("ln_") != std::string::npos) {
      constant_ = 1.0f;
    } else {
      stddev_ = t.name.ends_with("c_proj.weight") ? 0.02f / std::sqrt(2.0f * static_cast<float>(spec.n_layer))
                                                  : 0.02f;
      // Only real vocabulary rows are drawn; padding rows stay zero and never change.
      drawn_ = t.name == "wte.weight" ? spec.vocab_size * spec.n_embd : t.numel();
    }
  }
  float operator()(int64_t i) const {
    if (stddev_ == 0.0f) return constant_;
    return i < drawn_ ? stddev_ * static_cast<float>(random_normal(seed_, stream_, i)) : 0.0f;
  }

 private:
  uint64_t seed_, stream_;
  float constant_ = 0.0f, stddev_ = 0.0f;
  int64_t drawn_ = 0;
};

// dst[i] = value(first + i) as T, for i in [0, n).
template <typename T>
void fill(T* dst, const InitialValues& value, int64_t first, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) dst[i] = round_to<T>(value(first + i));
}

}  // namespace

void init_gpt2_params(const ModelSpec& spec, const Gpt2Graph& model, Allocation& memory, uint64_t seed) {
  const Plan& plan = memory.plan();
  for (int id : model.params) {
    const TensorDesc& t = model.graph.table[id];
    const InitialValues value(t, spec, seed);
    const int64_t offset = memory.param_offset(id), n = t.numel();
    // This rank's part of the weights: all of them, or its shard under ZeRO-3.
    const int64_t first = std::max(offset, plan.weights_begin()),
                  last = std::min(offset + n, plan.weights_end());
    if (first < last) {
      if (t.dtype == DType::f32) fill(memory.weights_from<float>(first), value, first - offset, last - first);
      if (t.dtype == DType::bf16) fill(memory.weights_from<bf16>(first), value, first - offset, last - first);
      if (t.dtype == DType::f16) fill(memory.weights_from<f16>(first), value, first - offset, last - first);
    }
    // The master copy holds the exact fp32 values of this rank's part of the tensor (streamed into the
    // offload file in chunks when offloaded).
    const int64_t begin = std::max(offset, plan.shard_begin), end = std::min(offset + n, plan.shard_end);
    if (plan.policy.master_weights)
      memory.optimizer_state().visit(begin, end, StateAccess::write_master, [&](const StateWindow& w) {
        fill(w.master, value, w.begin - offset, w.end - w.begin);
      });
  }
}

}  // namespace mt
