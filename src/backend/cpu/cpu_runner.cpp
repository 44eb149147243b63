// The CPU backend's op runner: each op kind's kernel in backend/cpu/, over T-typed weights and activations
// (fp32, bf16, f16) and G-typed gradients (fp32, bf16), chosen once from the run's policy. The operands and
// shapes come from exec/operands.h; the collectives never reach it (the executor runs them).
#include <algorithm>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cpu/activation.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/embedding.h"
#include "backend/cpu/layernorm.h"
#include "backend/cpu/lm_head.h"
#include "backend/cpu/lora.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/rope.h"
#include "exec/operands.h"

namespace mt {

namespace {

using operands::dropout_mask;
using operands::grad;
using operands::linear_shape;
using operands::lora_shape;
using operands::optional;
using operands::positions;
using operands::qkv_layout;
using operands::quantized_weight;
using operands::vocab_rows;
using operands::weights;

template <typename T, typename G>
class CpuBackend final : public CpuDevice {
 public:
  using CpuDevice::CpuDevice;
  void run(const Op& op, const OpRun& r) override;
  void logits(const Op& head, const OpRun& r, float* out) override;

 private:
  void lm_head_loss(const Op& op, const OpRun& r);
  void linear(const Op& op, const OpRun& r);
  void linear_backward(const Op& op, const OpRun& r);
  void lora(const Op& op, const OpRun& r);
  void lora_backward(const Op& op, const OpRun& r);
};

template <typename T, typename G>
void CpuBackend<T, G>::linear(const Op& op, const OpRun& r) {
  const auto& a = op.as<ops::Linear>();
  const Allocation& m = r.memory;
  const TensorTable& table = r.graph.table;
  const LinearShape s = linear_shape(table, a.inp, a.weight, a.weight_out_in);
  if (a.residual >= 0) {
    const TensorDesc& residual = table[a.residual];
    if (residual.numel() < table[a.out].numel()) std::memset(m.data(a.out), 0, table[a.out].bytes());
    std::memcpy(m.as<T>(a.out) + a.residual_row * s.out, m.data(a.residual), residual.bytes());
  }
  if (a.dequant_tile < 0) {
    kernels::linear_forward(m.as<T>(a.out), m.as<T>(a.inp), weights<T>(m, op, a.weight),
                            weights<T>(m, op, a.bias), s.M, s.in, s.out, a.residual >= 0,
                            optional<float>(m, a.matmul_scratch), s.layout);
  } else {
    kernels::quantized_linear_forward(
        m.as<T>(a.out), m.as<T>(a.inp), quantized_weight(m, a.weight), weights<T>(m, op, a.bias), s.M, s.in,
        s.out, a.residual >= 0, m.as<T>(a.dequant_tile), optional<float>(m, a.matmul_scratch), s.layout);
  }
}

template <typename T, typename G>
void CpuBackend<T, G>::linear_backward(const Op& op, const OpRun& r) {
  const auto& a = op.as<ops::LinearBackward>();
  const Allocation& m = r.memory;
  const LinearShape s = linear_shape(r.graph.table, a.inp, a.weight, a.weight_out_in);
  if (a.dequant_tile < 0) {
    kernels::linear_backward(m.as<T>(a.dinp), grad<G>(m, op, a.weight), grad<G>(m, op, a.bias),
                             m.as<T>(a.dout), m.as<T>(a.inp), weights<T>(m, op, a.weight), s.M, s.in, s.out,
                             a.accumulate, optional<float>(m, a.matmul_scratch), s.layout);
  } else if (a.dinp >= 0) {
    // A frozen weight has no gradient; its bias, frozen too, has none either.
    kernels::quantized_linear_backward_input(m.as<T>(a.dinp), m.as<T>(a.dout), quantized_weight(m, a.weight),
                                             s.M, s.in, s.out, a.accumulate, m.as<T>(a.dequant_tile),
                                             optional<float>(m, a.matmul_scratch), s.layout);
  }
}

template <typename T, typename G>
void CpuBackend<T, G>::lora(const Op& op, const OpRun& r) {
  const auto& a = op.as<ops::Lora>();
  const Allocation& m = r.memory;
  kernels::lora_forward(
      m.as<T>(a.out), m.as<T>(a.hidden), m.as<T>(a.inp), weights<T>(m, op, a.a), weights<T>(m, op, a.b),
      lora_shape(r.graph.table, a.inp, a.out, a.a, a.b, a.column, a.scale), dropout_mask(a.dropout, a.inp, r),
      optional<T>(m, a.dropped), optional<float>(m, a.matmul_scratch));
}

template <typename T, typename G>
void CpuBackend<T, G>::lora_backward(const Op& op, const OpRun& r) {
  const auto& a = op.as<ops::LoraBackward>();
  const Allocation& m = r.memory;
  kernels::lora_backward(
      m.as<T>(a.dinp), grad<G>(m, op, a.a), grad<G>(m, op, a.b), m.as<T>(a.grad_hidden), m.as<T>(a.dout),
      m.as<T>(a.inp), m.as<T>(a.hidden), weights<T>(m, op, a.a), weights<T>(m, op, a.b),
      lora_shape(r.graph.table, a.inp, a.dout, a.a, a.b, a.column, a.scale),
      dropout_mask(a.dropout, a.inp, r), optional<T>(m, a.dropped), optional<float>(m, a.matmul_scratch));
}

template <typename T, typename G>
void CpuBackend<T, G>::logits(const Op& op, const OpRun& r, float* out) {
  const ops::LmHeadLoss& head = op.as<ops::LmHeadLoss>();
  if (r.tp > 1) throw std::logic_error("cpu backend: whole logits of a split vocabulary");
  const int64_t N = r.graph.table[head.targets].numel(), C = r.spec.n_embd, Vp = r.spec.padded_vocab_size;
  kernels::gemm(false, true, N, Vp, C, r.memory.as<T>(head.inp), C, weights<T>(r.memory, op, head.weight), C,
                0.0f, out, Vp, optional<float>(r.memory, head.matmul_scratch));
}

// The head works a chunk of rows at a time (backend/cpu/lm_head.h), so the fp32 logits exist for one chunk.
template <typename T, typename G>
void CpuBackend<T, G>::lm_head_loss(const Op& op, const OpRun& r) {
  const ops::LmHeadLoss& a = op.as<ops::LmHeadLoss>();
  const TensorTable& table = r.graph.table;
  const Allocation& m = r.memory;
  const ModelSpec& spec = r.spec;
  // Under tensor parallelism the weight holds this rank's rows of the vocabulary, of which V are real.
  const int64_t N = table[a.targets].numel(), C = spec.n_embd, Vp = table[a.weight].shape[0];
  const int64_t V = std::clamp<int64_t>(spec.vocab_size - a.vocab_begin, 0, Vp);
  const int64_t rows = table[a.logits].numel() / Vp;
  const int64_t counted = r.loss_targets;
  const uint8_t* loss_mask = a.loss_mask >= 0 ? m.u8(a.loss_mask) : nullptr;
  float* losses = m.f32(a.losses);
  std::optional<kernels::VocabSplit> split;
  if (a.row_stats >= 0) {
    if (!r.gather_row_stats)
      throw std::logic_error("cpu backend: " + op.name + " without a tensor-parallel group");
    split = kernels::VocabSplit{.begin = a.vocab_begin,
                                .ranks = r.tp,
                                .rank = r.tp_rank,
                                .stats = m.f32(a.row_stats),
                                .gather = r.gather_row_stats};
  }
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    kernels::lm_head_loss_chunk<T, G>({
        .x = m.as<T>(a.inp) + r0 * C,
        .wte = weights<T>(m, op, a.weight),
        .targets = m.i32(a.targets) + r0,
        .loss_mask = loss_mask ? loss_mask + r0 : nullptr,
        .logits = m.f32(a.logits),
        .dlogits = optional<T>(m, a.logits_grad),
        .losses = losses + r0,
        .dx = r.training ? m.as<T>(a.dinp) + r0 * C : nullptr,
        .dwte = r.training ? grad<G>(m, op, a.weight) : nullptr,
        .matmul_scratch = optional<float>(m, a.matmul_scratch),
        .rows = n,
        .C = C,
        .V = V,
        .Vp = Vp,
        .grad_scale = r.grad_scale / static_cast<float>(std::max<int64_t>(counted, 1)),
        .split = split ? &*split : nullptr,
    });
  }
  // A step without counted targets has loss 0 (and no gradient).
  if (counted == 0) return;
  double loss_sum = 0;
  for (int64_t i = 0; i < N; ++i) loss_sum += losses[i];
  *m.as<double>(a.loss_sum) += loss_sum / static_cast<double>(counted);
}

template <typename T, typename G>
void CpuBackend<T, G>::run(const Op& op, const OpRun& r) {
  const TensorTable& table = r.graph.table;
  const Allocation& m = r.memory;
  const ModelSpec& spec = r.spec;
  switch (op.kind()) {
    case OpKind::embedding: {
      const auto& a = op.as<ops::Embedding>();
      const TensorDesc& tokens = table[a.tokens];
      kernels::embedding_forward(m.as<T>(a.out), m.i32(a.tokens), positions(m, a.positions),
                                 weights<T>(m, op, a.wte), weights<T>(m, op, a.wpe), tokens.shape[0],
                                 tokens.shape[1], spec.n_embd, vocab_rows(table, a.wte, a.vocab_begin));
      return;
    }
    case OpKind::layernorm: {
      const auto& a = op.as<ops::LayerNorm>();
      const int64_t C = table[a.weight].numel(), N = table[a.inp].numel() / C;
      kernels::layernorm_forward(m.as<T>(a.out), m.f32(a.mean), m.f32(a.rstd), m.as<T>(a.inp),
                                 weights<T>(m, op, a.weight), weights<T>(m, op, a.bias), N, C, spec.ln_eps);
      return;
    }
    case OpKind::rmsnorm: {
      const auto& a = op.as<ops::RmsNorm>();
      const int64_t C = table[a.weight].numel(), N = table[a.inp].numel() / C;
      kernels::rmsnorm_forward(m.as<T>(a.out), m.f32(a.rstd), m.as<T>(a.inp), weights<T>(m, op, a.weight), N,
                               C, spec.ln_eps);
      return;
    }
    case OpKind::linear:
      linear(op, r);
      return;
    case OpKind::rope: {
      const auto& a = op.as<ops::Rope>();
      const TensorDesc& qkv = table[a.qkv];
      kernels::rope_forward(m.as<T>(a.qkv), positions(m, a.positions), qkv.shape[0], qkv.shape[1],
                            qkv_layout(spec, r.tp), spec.rope_theta);
      return;
    }
    case OpKind::attention: {
      const auto& a = op.as<ops::Attention>();
      const TensorDesc& qkv = table[a.qkv];
      kernels::attention_forward(m.as<T>(a.out), m.f32(a.lse), m.as<T>(a.qkv), positions(m, a.positions),
                                 qkv.shape[0], qkv.shape[1], spec.n_embd / r.tp, spec.n_head / r.tp,
                                 spec.n_kv_head / r.tp, m.f32(a.scratch));
      return;
    }
    case OpKind::gelu: {
      const auto& a = op.as<ops::Gelu>();
      kernels::gelu_forward(m.as<T>(a.out), m.as<T>(a.inp), table[a.inp].numel());
      return;
    }
    case OpKind::swiglu: {
      const auto& a = op.as<ops::Swiglu>();
      const int64_t I = table[a.out].shape[2];
      kernels::swiglu_forward(m.as<T>(a.out), m.as<T>(a.gate_up), table[a.out].numel() / I, I);
      return;
    }
    case OpKind::lm_head_loss:
      lm_head_loss(op, r);
      return;
    case OpKind::lora:
      lora(op, r);
      return;
    case OpKind::lora_backward:
      lora_backward(op, r);
      return;
    case OpKind::zero: {
      const auto& a = op.as<ops::Zero>();
      std::memset(m.data(a.out), 0, table[a.out].bytes());
      return;
    }
    case OpKind::layernorm_backward: {
      const auto& a = op.as<ops::LayerNormBackward>();
      const int64_t C = table[a.weight].numel(), N = table[a.inp].numel() / C;
      kernels::layernorm_backward(m.as<T>(a.dinp), grad<G>(m, op, a.weight), grad<G>(m, op, a.bias),
                                  m.as<T>(a.dout), m.as<T>(a.inp), weights<T>(m, op, a.weight), m.f32(a.mean),
                                  m.f32(a.rstd), N, C);
      return;
    }
    case OpKind::rmsnorm_backward: {
      const auto& a = op.as<ops::RmsNormBackward>();
      const int64_t C = table[a.weight].numel(), N = table[a.inp].numel() / C;
      kernels::rmsnorm_backward(m.as<T>(a.dinp), grad<G>(m, op, a.weight), m.as<T>(a.dout), m.as<T>(a.inp),
                                weights<T>(m, op, a.weight), m.f32(a.rstd), N, C);
      return;
    }
    case OpKind::linear_backward:
      linear_backward(op, r);
      return;
    case OpKind::rope_backward: {
      const auto& a = op.as<ops::RopeBackward>();
      const TensorDesc& dqkv = table[a.dqkv];
      kernels::rope_backward(m.as<T>(a.dqkv), positions(m, a.positions), dqkv.shape[0], dqkv.shape[1],
                             qkv_layout(spec, r.tp), spec.rope_theta);
      return;
    }
    case OpKind::attention_backward: {
      const auto& a = op.as<ops::AttentionBackward>();
      const TensorDesc& qkv = table[a.qkv];
      kernels::attention_backward(m.as<T>(a.dqkv), m.as<T>(a.dout), m.as<T>(a.qkv), m.as<T>(a.out),
                                  m.f32(a.lse), positions(m, a.positions), qkv.shape[0], qkv.shape[1],
                                  spec.n_embd / r.tp, spec.n_head / r.tp, spec.n_kv_head / r.tp,
                                  m.f32(a.scratch));
      return;
    }
    case OpKind::gelu_backward: {
      const auto& a = op.as<ops::GeluBackward>();
      kernels::gelu_backward(m.as<T>(a.dinp), m.as<T>(a.inp), m.as<T>(a.dout), table[a.inp].numel());
      return;
    }
    case OpKind::swiglu_backward: {
      const auto& a = op.as<ops::SwigluBackward>();
      const int64_t I = table[a.dout].shape[2];
      kernels::swiglu_backward(m.as<T>(a.dgate_up), m.as<T>(a.gate_up), m.as<T>(a.dout),
                               table[a.dout].numel() / I, I);
      return;
    }
    case OpKind::embedding_backward: {
      const auto& a = op.as<ops::EmbeddingBackward>();
      const TensorDesc& tokens = table[a.tokens];
      kernels::embedding_backward(grad<G>(m, op, a.wte), grad<G>(m, op, a.wpe), m.as<T>(a.dout),
                                  m.i32(a.tokens), positions(m, a.positions), tokens.shape[0],
                                  tokens.shape[1], spec.n_embd,
                                  a.wte >= 0 ? vocab_rows(table, a.wte, a.vocab_begin) : VocabRows{});
      return;
    }
    case OpKind::all_reduce:
    case OpKind::all_gather:
    case OpKind::reduce_scatter:
    case OpKind::pipe_exchange:
      break;  // the executor's
  }
  throw std::logic_error("cpu backend: op " + op.name + " is not a kernel");
}

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const CpuTarget& target, const ModelStatePolicy& p) {
  // The plan's workspace was sized for the target's level: the kernels must run at it.
  if (target.isa != kernels::cpu_isa())
    throw std::logic_error("cpu backend: the plan was made for level " +
                           std::string(cpu_isa_name(target.isa)) + ", but the kernels run at " +
                           std::string(cpu_isa_name(kernels::cpu_isa())));
  if (p.weights == DType::f32 && p.grads == DType::f32)
    return std::make_unique<CpuBackend<float, float>>(target);
  if (p.weights == DType::bf16 && p.grads == DType::f32)
    return std::make_unique<CpuBackend<bf16, float>>(target);
  if (p.weights == DType::bf16 && p.grads == DType::bf16)
    return std::make_unique<CpuBackend<bf16, bf16>>(target);
  if (p.weights == DType::f16 && p.grads == DType::f32)
    return std::make_unique<CpuBackend<f16, float>>(target);
  throw std::logic_error("cpu backend: no kernels for weights " + std::string(dtype_name(p.weights)) +
                         " with gradients " + std::string(dtype_name(p.grads)));
}

}  // namespace mt
