#include "model/gpt2.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/rng.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "model/model_states.h"

namespace mt {

namespace {

// Builds the table and the op list side by side; names follow Hugging Face GPT-2 for parameters.
// Tensors in the compute dtype unless they are statistics (fp32 for accuracy) or fp32 scratch.
class Builder {
 public:
  Builder(Graph& g, DType dtype) : g_(g), dtype_(dtype) {}

  int param(const std::string& name, std::vector<int64_t> shape) {
    return g_.table.add({name, std::move(shape), dtype_, Category::params});
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
};

struct LayerParams {
  int ln1_w, ln1_b, attn_w, attn_b, proj_w, proj_b, ln2_w, ln2_b, fc_w, fc_b, fcproj_w, fcproj_b;
};

struct LayerActs {
  int inp, ln1, ln1_mean, ln1_rstd, qkv, atty, lse, res2, ln2, ln2_mean, ln2_rstd, fch, fch_gelu, out;
};

}  // namespace

Gpt2Graph build_gpt2_graph(const ModelSpec& spec, const RunShape& shape) {
  const int64_t B = shape.batch, T = shape.seq_len, C = spec.n_embd, NH = spec.n_head, L = spec.n_layer;
  const int64_t Vp = spec.padded_vocab_size;
  Gpt2Graph m;
  Graph& g = m.graph;
  Builder b(g, shape.dtype);
  // Matrix products whose inputs the library cannot take directly get conversion tiles (f16 on most CPUs).
  const int64_t matmul_floats = kernels::gemm_scratch_floats(shape.dtype);
  const int mm = matmul_floats > 0 ? b.scratch("matmul.scratch", matmul_floats) : -1;

  m.tokens = b.tensor("batch.tokens", {B, T}, Category::other, DType::i32);
  m.targets = b.tensor("batch.targets", {B, T}, Category::other, DType::i32);

  const int wte = b.param("wte.weight", {Vp, C});
  const int wpe = b.param("wpe.weight", {spec.n_positions, C});
  m.params = {wte, wpe};
  std::vector<LayerParams> lp(L);
  for (int64_t l = 0; l < L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
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
  const int lnf_w = b.param("ln_f.weight", {C}), lnf_b = b.param("ln_f.bias", {C});
  m.params.insert(m.params.end(), {lnf_w, lnf_b});

  // Forward. Each layer's output is the next layer's input: the residual stream is never copied.
  const int64_t attn_scratch = kernels::attention_scratch_floats(T, C / NH, shape.threads, shape.dtype);
  int residual = b.act("embed.out", {B, T, C});
  b.op({.kind = OpKind::embedding,
        .name = "embed",
        .out = residual,
        .weight = wte,
        .bias = wpe,
        .labels = m.tokens});
  std::vector<LayerActs> la(L);
  for (int64_t l = 0; l < L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    const LayerParams& p = lp[l];
    LayerActs& a = la[l];
    a.inp = residual;
    a.ln1 = b.act(h + "ln_1.out", {B, T, C});
    a.ln1_mean = b.stat(h + "ln_1.mean", {B, T});
    a.ln1_rstd = b.stat(h + "ln_1.rstd", {B, T});
    a.qkv = b.act(h + "attn.qkv", {B, T, 3 * C});
    a.atty = b.act(h + "attn.out", {B, T, C});
    a.lse = b.stat(h + "attn.lse", {B, NH, T});
    a.res2 = b.act(h + "attn.residual", {B, T, C});
    a.ln2 = b.act(h + "ln_2.out", {B, T, C});
    a.ln2_mean = b.stat(h + "ln_2.mean", {B, T});
    a.ln2_rstd = b.stat(h + "ln_2.rstd", {B, T});
    a.fch = b.act(h + "mlp.fc", {B, T, 4 * C});
    a.fch_gelu = b.act(h + "mlp.gelu", {B, T, 4 * C});
    a.out = b.act(h + "out", {B, T, C});
    b.op({.kind = OpKind::layernorm,
          .name = h + "ln_1",
          .inp = a.inp,
          .out = a.ln1,
          .weight = p.ln1_w,
          .bias = p.ln1_b,
          .stat0 = a.ln1_mean,
          .stat1 = a.ln1_rstd});
    b.op({.kind = OpKind::linear,
          .name = h + "attn.c_attn",
          .inp = a.ln1,
          .out = a.qkv,
          .weight = p.attn_w,
          .bias = p.attn_b,
          .matmul_scratch = mm});
    b.op({.kind = OpKind::attention,
          .name = h + "attn",
          .inp = a.qkv,
          .out = a.atty,
          .stat0 = a.lse,
          .scratch = b.scratch(h + "attn.scratch", attn_scratch)});
    b.op({.kind = OpKind::linear,
          .name = h + "attn.c_proj",
          .inp = a.atty,
          .out = a.res2,
          .residual = a.inp,
          .weight = p.proj_w,
          .bias = p.proj_b,
          .matmul_scratch = mm});
    b.op({.kind = OpKind::layernorm,
          .name = h + "ln_2",
          .inp = a.res2,
          .out = a.ln2,
          .weight = p.ln2_w,
          .bias = p.ln2_b,
          .stat0 = a.ln2_mean,
          .stat1 = a.ln2_rstd});
    b.op({.kind = OpKind::linear,
          .name = h + "mlp.c_fc",
          .inp = a.ln2,
          .out = a.fch,
          .weight = p.fc_w,
          .bias = p.fc_b,
          .matmul_scratch = mm});
    b.op({.kind = OpKind::gelu, .name = h + "mlp.gelu", .inp = a.fch, .out = a.fch_gelu});
    b.op({.kind = OpKind::linear,
          .name = h + "mlp.c_proj",
          .inp = a.fch_gelu,
          .out = a.out,
          .residual = a.res2,
          .weight = p.fcproj_w,
          .bias = p.fcproj_b,
          .matmul_scratch = mm});
    residual = a.out;
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
  // taken inside the same op, so the step never holds [B*T, Vp] logits.
  // In 16-bit runs the loss gradient is rounded into its own chunk buffer for the products that follow.
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
        .dscratch = shape.dtype == DType::f32
                        ? -1
                        : b.tensor("lm_head.logits.grad", {chunk}, Category::workspace, shape.dtype),
        .matmul_scratch = mm,
        .labels = m.targets});

  // Backward. One residual-stream gradient accumulates through every block, in place.
  const int dres = b.act("residual.grad", {B, T, C});
  b.op({.kind = OpKind::zero, .name = "residual.grad.zero", .out = dres});
  b.op({.kind = OpKind::layernorm_backward,
        .name = "ln_f.backward",
        .inp = residual,
        .weight = lnf_w,
        .bias = lnf_b,
        .stat0 = lnf_mean,
        .stat1 = lnf_rstd,
        .dinp = dres,
        .dout = dlnf});
  for (int64_t l = L - 1; l >= 0; --l) {
    const std::string h = "h." + std::to_string(l) + ".";
    const LayerParams& p = lp[l];
    const LayerActs& a = la[l];
    const int dfch = b.act(h + "mlp.fc.grad", {B, T, 4 * C});
    const int dln2 = b.act(h + "ln_2.out.grad", {B, T, C});
    const int datty = b.act(h + "attn.out.grad", {B, T, C});
    const int dqkv = b.act(h + "attn.qkv.grad", {B, T, 3 * C});
    const int dln1 = b.act(h + "ln_1.out.grad", {B, T, C});
    b.op({.kind = OpKind::linear_backward,
          .name = h + "mlp.c_proj.backward",
          .inp = a.fch_gelu,
          .weight = p.fcproj_w,
          .bias = p.fcproj_b,
          .dinp = dfch,
          .dout = dres,
          .matmul_scratch = mm});
    b.op({.kind = OpKind::gelu_backward,
          .name = h + "mlp.gelu.backward",
          .inp = a.fch,
          .dinp = dfch,
          .dout = dfch});
    b.op({.kind = OpKind::linear_backward,
          .name = h + "mlp.c_fc.backward",
          .inp = a.ln2,
          .weight = p.fc_w,
          .bias = p.fc_b,
          .dinp = dln2,
          .dout = dfch,
          .matmul_scratch = mm});
    b.op({.kind = OpKind::layernorm_backward,
          .name = h + "ln_2.backward",
          .inp = a.res2,
          .weight = p.ln2_w,
          .bias = p.ln2_b,
          .stat0 = a.ln2_mean,
          .stat1 = a.ln2_rstd,
          .dinp = dres,
          .dout = dln2});
    b.op({.kind = OpKind::linear_backward,
          .name = h + "attn.c_proj.backward",
          .inp = a.atty,
          .weight = p.proj_w,
          .bias = p.proj_b,
          .dinp = datty,
          .dout = dres,
          .matmul_scratch = mm});
    b.op({.kind = OpKind::attention_backward,
          .name = h + "attn.backward",
          .inp = a.qkv,
          .out = a.atty,
          .stat0 = a.lse,
          .dinp = dqkv,
          .dout = datty,
          .scratch = b.scratch(h + "attn.backward.scratch", attn_scratch)});
    b.op({.kind = OpKind::linear_backward,
          .name = h + "attn.c_attn.backward",
          .inp = a.ln1,
          .weight = p.attn_w,
          .bias = p.attn_b,
          .dinp = dln1,
          .dout = dqkv,
          .matmul_scratch = mm});
    b.op({.kind = OpKind::layernorm_backward,
          .name = h + "ln_1.backward",
          .inp = a.inp,
          .weight = p.ln1_w,
          .bias = p.ln1_b,
          .stat0 = a.ln1_mean,
          .stat1 = a.ln1_rstd,
          .dinp = dres,
          .dout = dln1});
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

// Draws one tensor's initial values in fp32 and stores them as T.
template <typename T>
void init_tensor(T* w, const TensorDesc& t, const ModelSpec& spec, uint64_t seed) {
  const int64_t n = t.numel();
  if (t.name.ends_with(".bias")) {
    std::fill(w, w + n, round_to<T>(0.0f));
    return;
  }
  if (t.name.find("ln_") != std::string::npos) {
    std::fill(w, w + n, round_to<T>(1.0f));
    return;
  }
  const float stddev =
      t.name.ends_with("c_proj.weight") ? 0.02f / std::sqrt(2.0f * static_cast<float>(spec.n_layer)) : 0.02f;
  // Only real vocabulary rows are drawn; padding rows stay zero and never change.
  const int64_t drawn = t.name == "wte.weight" ? spec.vocab_size * spec.n_embd : n;
  const uint64_t stream = hash_name(t.name);
#pragma omp parallel for
  for (int64_t i = 0; i < drawn; ++i)
    w[i] = round_to<T>(stddev * static_cast<float>(random_normal(seed, stream, i)));
  std::fill(w + drawn, w + n, round_to<T>(0.0f));
}

}  // namespace

void init_gpt2_params(const ModelSpec& spec, const Gpt2Graph& model, Allocation& memory, uint64_t seed) {
  for (int id : model.params) {
    const TensorDesc& t = model.graph.table[id];
    if (float* master = memory.master(id)) {
      init_tensor(master, t, spec, seed);
    } else if (t.dtype == DType::bf16) {
      init_tensor(memory.as<bf16>(id), t, spec, seed);
    } else {
      init_tensor(memory.f32(id), t, spec, seed);
    }
  }
  round_master_into_weights(memory);
}

}  // namespace mt
