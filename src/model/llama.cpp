#include "model/llama.h"

#include <string>

#include "kernels/attention.h"
#include "model/init.h"

namespace mt {

namespace {

struct LayerParams {
  int norm1, qkv_w, qkv_b, o_w, norm2, gate_up_w, down_w;
};

struct LayerActs {
  int inp, norm1, rstd1, qkv, atty, lse, res2, norm2, rstd2, gate_up, act, out;
};

class LlamaBlocks : public BlockEmitter {
 public:
  LlamaBlocks(GraphBuilder& b, const ModelSpec& spec)
      : b_(b),
        B_(b.step().batch),
        T_(b.step().seq_len),
        C_(spec.n_embd),
        QKV_(spec.n_embd + 2 * spec.kv_dim()),
        I_(spec.intermediate_size),
        NH_(spec.n_head),
        attn_scratch_(
            kernels::attention_scratch_floats(T_, spec.head_dim(), b.step().threads, b.step().dtype)),
        acts_(spec.n_layer) {
    for (int64_t l = 0; l < spec.n_layer; ++l) {
      const std::string h = prefix(l);
      b.begin_block();
      LayerParams p;
      p.norm1 = b.param(h + "input_layernorm.weight", {C_});
      p.qkv_w = b.param(h + "self_attn.qkv_proj.weight", {QKV_, C_});
      p.qkv_b = spec.qkv_bias ? b.param(h + "self_attn.qkv_proj.bias", {QKV_}) : -1;
      p.o_w = b.param(h + "self_attn.o_proj.weight", {C_, C_});
      p.norm2 = b.param(h + "post_attention_layernorm.weight", {C_});
      p.gate_up_w = b.param(h + "mlp.gate_up_proj.weight", {2 * I_, C_});
      p.down_w = b.param(h + "mlp.down_proj.weight", {C_, I_});
      params_.push_back(p);
    }
  }

  int forward(int64_t l, int inp, const std::string& suffix) override {
    const LayerParams& p = params_[l];
    const std::string h = prefix(l);
    LayerActs& a = acts_[l];
    a.inp = inp;
    a.qkv = b_.act(h + "self_attn.qkv" + suffix, QKV_);
    a.atty = b_.act(h + "self_attn.out" + suffix, C_);
    a.lse = b_.stat(h + "self_attn.lse" + suffix, {B_, NH_, T_});
    a.res2 = b_.act(h + "self_attn.residual" + suffix, C_);
    a.gate_up = b_.act(h + "mlp.gate_up" + suffix, 2 * I_);
    a.out = b_.act(h + "out" + suffix, C_);
    rmsnorm(h + "input_layernorm", suffix, a.inp, p.norm1, a.norm1, a.rstd1);
    b_.linear(h + "self_attn.qkv_proj" + suffix, a.norm1, a.qkv, -1, p.qkv_w, p.qkv_b, true);
    b_.op({.kind = OpKind::rope, .name = h + "self_attn.rope" + suffix, .out = a.qkv});
    b_.op({.kind = OpKind::attention,
           .name = h + "self_attn" + suffix,
           .inp = a.qkv,
           .out = a.atty,
           .stat0 = a.lse,
           .scratch = b_.scratch(h + "self_attn.scratch" + suffix, attn_scratch_)});
    b_.linear(h + "self_attn.o_proj" + suffix, a.atty, a.res2, a.inp, p.o_w, -1, true);
    rmsnorm(h + "post_attention_layernorm", suffix, a.res2, p.norm2, a.norm2, a.rstd2);
    b_.linear(h + "mlp.gate_up_proj" + suffix, a.norm2, a.gate_up, -1, p.gate_up_w, -1, true);
    swiglu(h + "mlp.swiglu" + suffix, a.gate_up, a.act);
    b_.linear(h + "mlp.down_proj" + suffix, a.act, a.out, a.res2, p.down_w, -1, true);
    return a.out;
  }

  void backward(int64_t l, int dres, bool selective) override {
    const LayerParams& p = params_[l];
    LayerActs& a = acts_[l];
    const std::string h = prefix(l), re = ".recomputed";
    const int dact = b_.act(h + "mlp.swiglu.out.grad", I_);
    const int dgate_up = b_.act(h + "mlp.gate_up.grad", 2 * I_);
    const int dnorm2 = b_.act(h + "post_attention_layernorm.out.grad", C_);
    const int datty = b_.act(h + "self_attn.out.grad", C_);
    const int dqkv = b_.act(h + "self_attn.qkv.grad", QKV_);
    const int dnorm1 = b_.act(h + "input_layernorm.out.grad", C_);
    if (selective) swiglu(h + "mlp.swiglu" + re, a.gate_up, a.act);
    b_.linear_backward(h + "mlp.down_proj.backward", a.act, p.down_w, -1, dact, dres, true);
    b_.op({.kind = OpKind::swiglu_backward,
           .name = h + "mlp.swiglu.backward",
           .inp = a.gate_up,
           .dinp = dgate_up,
           .dout = dact});
    if (selective) rmsnorm(h + "post_attention_layernorm", re, a.res2, p.norm2, a.norm2, a.rstd2);
    b_.linear_backward(h + "mlp.gate_up_proj.backward", a.norm2, p.gate_up_w, -1, dnorm2, dgate_up, true);
    rmsnorm_backward(h + "post_attention_layernorm.backward", a.res2, p.norm2, a.rstd2, dres, dnorm2);
    b_.linear_backward(h + "self_attn.o_proj.backward", a.atty, p.o_w, -1, datty, dres, true);
    b_.op({.kind = OpKind::attention_backward,
           .name = h + "self_attn.backward",
           .inp = a.qkv,
           .out = a.atty,
           .stat0 = a.lse,
           .dinp = dqkv,
           .dout = datty,
           .scratch = b_.scratch(h + "self_attn.backward.scratch", attn_scratch_)});
    b_.op({.kind = OpKind::rope_backward, .name = h + "self_attn.rope.backward", .dinp = dqkv});
    if (selective) rmsnorm(h + "input_layernorm", re, a.inp, p.norm1, a.norm1, a.rstd1);
    b_.linear_backward(h + "self_attn.qkv_proj.backward", a.norm1, p.qkv_w, p.qkv_b, dnorm1, dqkv, true);
    rmsnorm_backward(h + "input_layernorm.backward", a.inp, p.norm1, a.rstd1, dres, dnorm1);
  }

  // An RMSNorm into new output and statistics tensors (returned through out and rstd).
  void rmsnorm(const std::string& name, const std::string& suffix, int inp, int w, int& out, int& rstd) {
    out = b_.act(name + ".out" + suffix, C_);
    rstd = b_.stat(name + ".rstd" + suffix, {B_, T_});
    b_.op(
        {.kind = OpKind::rmsnorm, .name = name + suffix, .inp = inp, .out = out, .weight = w, .stat1 = rstd});
  }

  void rmsnorm_backward(const std::string& name, int inp, int w, int rstd, int dinp, int dout) {
    b_.op({.kind = OpKind::rmsnorm_backward,
           .name = name,
           .inp = inp,
           .weight = w,
           .stat1 = rstd,
           .dinp = dinp,
           .dout = dout});
  }

 private:
  static std::string prefix(int64_t l) { return "model.layers." + std::to_string(l) + "."; }

  void swiglu(const std::string& name, int inp, int& out) {
    out = b_.act(name + ".out", I_);
    b_.op({.kind = OpKind::swiglu, .name = name, .inp = inp, .out = out});
  }

  GraphBuilder& b_;
  int64_t B_, T_, C_, QKV_, I_, NH_;
  int64_t attn_scratch_;
  std::vector<LayerParams> params_;
  std::vector<LayerActs> acts_;
};

}  // namespace

ModelGraph build_llama_graph(const ModelSpec& spec, const StepConfig& step) {
  const int64_t C = spec.n_embd, Vp = spec.padded_vocab_size;
  ModelGraph m;
  GraphBuilder b(m, step);
  const int embed = b.param("model.embed_tokens.weight", {Vp, C});
  LlamaBlocks blocks(b, spec);
  b.begin_block();  // the final norm and an untied head: one block, as their ops run back to back
  const int norm = b.param("model.norm.weight", {C});
  const int head = spec.tied_head ? embed : b.param("lm_head.weight", {Vp, C});

  const int embedded = b.act("model.embed_tokens.out", C);
  b.op({.kind = OpKind::embedding, .name = "embed", .out = embedded, .weight = embed, .labels = m.tokens});
  std::vector<int> inputs;
  const int residual = emit_layers_forward(blocks, spec.n_layer, embedded, inputs);
  int normed = -1, rstd = -1;
  blocks.rmsnorm("model.norm", "", residual, norm, normed, rstd);
  const int dnormed = b.lm_head_loss(normed, head, C, Vp);

  // Backward. One residual-stream gradient accumulates through every block, in place.
  const int dres = b.act("residual.grad", C);
  b.op({.kind = OpKind::zero, .name = "residual.grad.zero", .out = dres});
  blocks.rmsnorm_backward("model.norm.backward", residual, norm, rstd, dres, dnormed);
  emit_layers_backward(blocks, b.step(), spec.n_layer, inputs, dres);
  b.op({.kind = OpKind::embedding_backward,
        .name = "embed.backward",
        .weight = embed,
        .dout = dres,
        .labels = m.tokens});
  b.finish();
  return m;
}

void init_llama_params(const ModelSpec& spec, const ModelGraph& model, Allocation& memory, uint64_t seed) {
  init_params(model, memory, seed, [&](const TensorDesc& t) -> InitRule {
    if (t.name.ends_with(".bias")) return {.constant = 0.0f};
    if (t.name.ends_with("norm.weight")) return {.constant = 1.0f};
    // Only real vocabulary rows are drawn; padding rows stay zero and never change.
    const bool vocab = t.name == "model.embed_tokens.weight" || t.name == "lm_head.weight";
    return {.stddev = 0.02f, .drawn = vocab ? spec.vocab_size * spec.n_embd : t.numel()};
  });
}

}  // namespace mt
