#include "model/gpt2.h"

#include <cmath>
#include <string>

#include "kernels/attention.h"
#include "model/init.h"

namespace mt {

namespace {

struct LayerParams {
  int ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
};

struct LayerActs {
  int inp, ln1, ln1_mean, ln1_rstd, qkv, atty, lse, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, out;
};

class Gpt2Blocks : public BlockEmitter {
 public:
  Gpt2Blocks(GraphBuilder& b, const ModelSpec& spec)
      : b_(b),
        B_(b.step().batch),
        T_(b.step().seq_len),
        C_(spec.n_embd),
        NH_(spec.n_head),
        attn_scratch_(
            kernels::attention_scratch_floats(T_, spec.head_dim(), b.step().threads, b.step().dtype)),
        acts_(spec.n_layer) {
    for (int64_t l = 0; l < spec.n_layer; ++l) {
      const std::string h = "h." + std::to_string(l) + ".";
      const int64_t C = C_;
      b.begin_block();
      params_.push_back({b.param(h + "ln_1.weight", {C}), b.param(h + "ln_1.bias", {C}),
                         b.param(h + "attn.c_attn.weight", {C, 3 * C}),
                         b.param(h + "attn.c_attn.bias", {3 * C}), b.param(h + "attn.c_proj.weight", {C, C}),
                         b.param(h + "attn.c_proj.bias", {C}), b.param(h + "ln_2.weight", {C}),
                         b.param(h + "ln_2.bias", {C}), b.param(h + "mlp.c_fc.weight", {C, 4 * C}),
                         b.param(h + "mlp.c_fc.bias", {4 * C}), b.param(h + "mlp.c_proj.weight", {4 * C, C}),
                         b.param(h + "mlp.c_proj.bias", {C})});
    }
  }

  int forward(int64_t l, int inp, const std::string& suffix) override {
    const LayerParams& p = params_[l];
    const std::string h = prefix(l);
    LayerActs& a = acts_[l];
    a.inp = inp;
    a.qkv = b_.act(h + "attn.qkv" + suffix, 3 * C_);
    a.atty = b_.act(h + "attn.out" + suffix, C_);
    a.lse = b_.stat(h + "attn.lse" + suffix, {B_, NH_, T_});
    a.res2 = b_.act(h + "attn.residual" + suffix, C_);
    a.fch = b_.act(h + "mlp.fc" + suffix, 4 * C_);
    a.out = b_.act(h + "out" + suffix, C_);
    layernorm(h + "ln_1", suffix, a.inp, p.ln1_w, p.ln1_b, a.ln1, a.ln1_mean, a.ln1_rstd);
    b_.linear(h + "attn.c_attn" + suffix, a.ln1, a.qkv, -1, p.attn_w, p.attn_b);
    b_.op({.kind = OpKind::attention,
           .name = h + "attn" + suffix,
           .inp = a.qkv,
           .out = a.atty,
           .stat0 = a.lse,
           .scratch = b_.scratch(h + "attn.scratch" + suffix, attn_scratch_)});
    b_.linear(h + "attn.c_proj" + suffix, a.atty, a.res2, a.inp, p.proj_w, p.proj_b);
    layernorm(h + "ln_2", suffix, a.res2, p.ln2_w, p.ln2_b, a.ln2, a.ln2_mean, a.ln2_rstd);
    b_.linear(h + "mlp.c_fc" + suffix, a.ln2, a.fch, -1, p.fc_w, p.fc_b);
    gelu(h + "mlp.gelu" + suffix, a.fch, a.fch_gelu);
    b_.linear(h + "mlp.c_proj" + suffix, a.fch_gelu, a.out, a.res2, p.fcproj_w, p.fcproj_b);
    return a.out;
  }

  void backward(int64_t l, int dres, bool selective) override {
    const LayerParams& p = params_[l];
    LayerActs& a = acts_[l];
    const std::string h = prefix(l), re = ".recomputed";
    const int dfch = b_.act(h + "mlp.fc.grad", 4 * C_);
    const int dln2 = b_.act(h + "ln_2.out.grad", C_);
    const int datty = b_.act(h + "attn.out.grad", C_);
    const int dqkv = b_.act(h + "attn.qkv.grad", 3 * C_);
    const int dln1 = b_.act(h + "ln_1.out.grad", C_);
    if (selective) gelu(h + "mlp.gelu" + re, a.fch, a.fch_gelu);
    b_.linear_backward(h + "mlp.c_proj.backward", a.fch_gelu, p.fcproj_w, p.fcproj_b, dfch, dres);
    b_.op({.kind = OpKind::gelu_backward,
           .name = h + "mlp.gelu.backward",
           .inp = a.fch,
           .dinp = dfch,
           .dout = dfch});
    if (selective) layernorm(h + "ln_2", re, a.res2, p.ln2_w, p.ln2_b, a.ln2, a.ln2_mean, a.ln2_rstd);
    b_.linear_backward(h + "mlp.c_fc.backward", a.ln2, p.fc_w, p.fc_b, dln2, dfch);
    layernorm_backward(h + "ln_2.backward", a.res2, p.ln2_w, p.ln2_b, a.ln2_mean, a.ln2_rstd, dres, dln2);
    b_.linear_backward(h + "attn.c_proj.backward", a.atty, p.proj_w, p.proj_b, datty, dres);
    b_.op({.kind = OpKind::attention_backward,
           .name = h + "attn.backward",
           .inp = a.qkv,
           .out = a.atty,
           .stat0 = a.lse,
           .dinp = dqkv,
           .dout = datty,
           .scratch = b_.scratch(h + "attn.backward.scratch", attn_scratch_)});
    if (selective) layernorm(h + "ln_1", re, a.inp, p.ln1_w, p.ln1_b, a.ln1, a.ln1_mean, a.ln1_rstd);
    b_.linear_backward(h + "attn.c_attn.backward", a.ln1, p.attn_w, p.attn_b, dln1, dqkv);
    layernorm_backward(h + "ln_1.backward", a.inp, p.ln1_w, p.ln1_b, a.ln1_mean, a.ln1_rstd, dres, dln1);
  }

  // A LayerNorm into new output and statistics tensors (returned through out, mean, rstd).
  void layernorm(const std::string& name, const std::string& suffix, int inp, int w, int bias, int& out,
                 int& mean, int& rstd) {
    out = b_.act(name + ".out" + suffix, C_);
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
  static std::string prefix(int64_t l) { return "h." + std::to_string(l) + "."; }

  void gelu(const std::string& name, int inp, int& out) {
    out = b_.act(name + ".out", 4 * C_);
    b_.op({.kind = OpKind::gelu, .name = name, .inp = inp, .out = out});
  }

  GraphBuilder& b_;
  int64_t B_, T_, C_, NH_;
  int64_t attn_scratch_;
  std::vector<LayerParams> params_;
  std::vector<LayerActs> acts_;
};

}  // namespace

ModelGraph build_gpt2_graph(const ModelSpec& spec, const StepConfig& step) {
  const int64_t C = spec.n_embd;
  ModelGraph m;
  GraphBuilder b(m, step);
  const int wte = b.param("wte.weight", {spec.padded_vocab_size, C});
  const int wpe = b.param("wpe.weight", {spec.n_positions, C});
  Gpt2Blocks blocks(b, spec);
  b.begin_block();
  const int lnf_w = b.param("ln_f.weight", {C}), lnf_b = b.param("ln_f.bias", {C});

  const int embedded = b.act("embed.out", C);
  b.op({.kind = OpKind::embedding,
        .name = "embed",
        .out = embedded,
        .weight = wte,
        .bias = wpe,
        .labels = m.tokens});
  std::vector<int> inputs;
  const int residual = emit_layers_forward(blocks, spec.n_layer, embedded, inputs);
  int lnf = -1, lnf_mean = -1, lnf_rstd = -1;
  blocks.layernorm("ln_f", "", residual, lnf_w, lnf_b, lnf, lnf_mean, lnf_rstd);
  // The LM head is tied to wte.
  const int dlnf = b.lm_head_loss(lnf, wte, C, spec.padded_vocab_size);

  // Backward. One residual-stream gradient accumulates through every block, in place.
  const int dres = b.act("residual.grad", C);
  b.op({.kind = OpKind::zero, .name = "residual.grad.zero", .out = dres});
  blocks.layernorm_backward("ln_f.backward", residual, lnf_w, lnf_b, lnf_mean, lnf_rstd, dres, dlnf);
  emit_layers_backward(blocks, b.step(), spec.n_layer, inputs, dres);
  b.op({.kind = OpKind::embedding_backward,
        .name = "embed.backward",
        .weight = wte,
        .bias = wpe,
        .dout = dres,
        .labels = m.tokens});
  b.finish();
  return m;
}

void init_gpt2_params(const ModelSpec& spec, const ModelGraph& model, Allocation& memory, uint64_t seed) {
  init_params(model, memory, seed, [&](const TensorDesc& t) -> InitRule {
    if (t.name.ends_with(".bias")) return {.constant = 0.0f};
    if (t.name.find("ln_") != std::string::npos) return {.constant = 1.0f};
    const float stddev = t.name.ends_with("c_proj.weight")
                             ? 0.02f / std::sqrt(2.0f * static_cast<float>(spec.n_layer))
                             : 0.02f;
    // Only real vocabulary rows are drawn; padding rows stay zero and never change.
    return {.stddev = stddev, .drawn = t.name == "wte.weight" ? spec.vocab_size * spec.n_embd : t.numel()};
  });
}

}  // namespace mt
