// The CUDA backend's op runner: each op kind's kernel in backend/cuda/, over T-typed weights and activations
// (fp32, bf16, f16) and G-typed gradients (fp32, bf16), chosen once from the run's policy; the same operands
// and shapes as the CPU's runner (exec/operands.h), every kernel on the device's one stream. What the GPU
// does not run yet (a vocabulary split over tensor-parallel ranks) is a logic error naming the op: the flags'
// checks refuse such runs before they are planned for a GPU.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "backend/cuda/activation.cuh"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/embedding.cuh"
#include "backend/cuda/layernorm.cuh"
#include "backend/cuda/lm_head.cuh"
#include "backend/cuda/lora.cuh"
#include "backend/cuda/loss.cuh"
#include "backend/cuda/matmul.cuh"
#include "backend/cuda/rope.cuh"
#include "backend/cuda/weight_quant.cuh"
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

// cuBLASLt's planned workspace: the op's matmul scratch tensor.
struct Workspace {
  float* data;
  int64_t bytes;
};
Workspace workspace(const Allocation& m, int id) {
  if (id < 0) throw std::logic_error("cuda backend: a product without its planned cuBLASLt workspace");
  return {m.f32(id), m.table()[id].bytes()};
}

// A quantized weight's planned tile (GraphBuilder::dequant_tile): as many columns as it holds of the weight's
// longer side.
template <typename T>
cuda::DequantTile<T> dequant_tile(const Allocation& m, int id, const LinearShape& s) {
  const int64_t columns = m.table()[id].numel() / std::max(s.in, s.out);
  if (columns < 1) throw std::logic_error("cuda backend: a dequantization tile without a whole column");
  return {m.as<T>(id), columns};
}

template <typename T, typename G>
class CudaBackend final : public CudaDevice {
 public:
  using CudaDevice::CudaDevice;
  void run(const Op& op, const OpRun& r) override;
  void logits(const Op& head, const OpRun& r, float* out) override;

 private:
  void lm_head_loss(const Op& op, const OpRun& r);
  void linear(const Op& op, const OpRun& r);
  void linear_backward(const Op& op, const OpRun& r);
  void lora(const Op& op, const OpRun& r);
  void lora_backward(const Op& op, const OpRun& r);
  void backward(const Op& op, const OpRun& r);
};

template <typename T, typename G>
void CudaBackend<T, G>::linear(const Op& op, const OpRun& r) {
  const auto& a = op.as<ops::Linear>();
  const Allocation& m = r.memory;
  const TensorTable& table = r.graph.table;
  const LinearShape s = linear_shape(table, a.inp, a.weight, a.weight_out_in);
  if (a.residual >= 0) {
    // The output starts as the residual (in this rank's rows of a sequence-parallel partial sum).
    const TensorDesc& residual = table[a.residual];
    if (residual.numel() < table[a.out].numel())
      MT_CUDA_CHECK("linear", cudaMemsetAsync(m.data(a.out), 0, table[a.out].bytes(), stream_));
    MT_CUDA_CHECK("linear", cudaMemcpyAsync(m.as<T>(a.out) + a.residual_row * s.out, m.data(a.residual),
                                            residual.bytes(), cudaMemcpyDeviceToDevice, stream_));
  }
  const Workspace ws = workspace(m, a.matmul_scratch);
  if (a.dequant_tile < 0) {
    cuda::linear_forward(lt_, m.as<T>(a.out), m.as<T>(a.inp), weights<T>(m, op, a.weight),
                         weights<T>(m, op, a.bias), s.M, s.in, s.out, a.residual >= 0, ws.data, ws.bytes,
                         s.layout, stream_);
  } else {
    cuda::quantized_linear_forward(lt_, m.as<T>(a.out), m.as<T>(a.inp), quantized_weight(m, a.weight),
                                   weights<T>(m, op, a.bias), s, a.residual >= 0,
                                   dequant_tile<T>(m, a.dequant_tile, s), ws.data, ws.bytes, stream_);
  }
}

template <typename T, typename G>
void CudaBackend<T, G>::linear_backward(const Op& op, const OpRun& r) {
  const auto& a = op.as<ops::LinearBackward>();
  const Allocation& m = r.memory;
  const LinearShape s = linear_shape(r.graph.table, a.inp, a.weight, a.weight_out_in);
  const Workspace ws = workspace(m, a.matmul_scratch);
  if (a.dequant_tile < 0) {
    cuda::linear_backward(lt_, m.as<T>(a.dinp), grad<G>(m, op, a.weight), grad<G>(m, op, a.bias),
                          m.as<T>(a.dout), m.as<T>(a.inp), weights<T>(m, op, a.weight), s.M, s.in, s.out,
                          a.accumulate, ws.data, ws.bytes, s.layout, stream_);
  } else if (a.dinp >= 0) {
    // A frozen weight has no gradient; its bias, frozen too, has none either.
    cuda::quantized_linear_backward_input(lt_, m.as<T>(a.dinp), m.as<T>(a.dout),
                                          quantized_weight(m, a.weight), s, a.accumulate,
                                          dequant_tile<T>(m, a.dequant_tile, s), ws.data, ws.bytes, stream_);
  }
}

template <typename T, typename G>
void CudaBackend<T, G>::lora(const Op& op, const OpRun& r) {
  const auto& a = op.as<ops::Lora>();
  const Allocation& m = r.memory;
  const Workspace ws = workspace(m, a.matmul_scratch);
  cuda::lora_forward(
      lt_, m.as<T>(a.out), m.as<T>(a.hidden), m.as<T>(a.inp), weights<T>(m, op, a.a), weights<T>(m, op, a.b),
      lora_shape(r.graph.table, a.inp, a.out, a.a, a.b, a.column, a.scale), dropout_mask(a.dropout, a.inp, r),
      optional<T>(m, a.dropped), ws.data, ws.bytes, stream_);
}

template <typename T, typename G>
void CudaBackend<T, G>::lora_backward(const Op& op, const OpRun& r) {
  const auto& a = op.as<ops::LoraBackward>();
  const Allocation& m = r.memory;
  const Workspace ws = workspace(m, a.matmul_scratch);
  cuda::lora_backward(
      lt_, m.as<T>(a.dinp), grad<G>(m, op, a.a), grad<G>(m, op, a.b), m.as<T>(a.grad_hidden), m.as<T>(a.dout),
      m.as<T>(a.inp), m.as<T>(a.hidden), weights<T>(m, op, a.a), weights<T>(m, op, a.b),
      lora_shape(r.graph.table, a.inp, a.dout, a.a, a.b, a.column, a.scale),
      dropout_mask(a.dropout, a.inp, r), optional<T>(m, a.dropped), ws.data, ws.bytes, stream_);
}

// The whole logits, a chunk of rows at a time through the head's planned logits tensor, each chunk copied to
// the host.
template <typename T, typename G>
void CudaBackend<T, G>::logits(const Op& op, const OpRun& r, float* out) {
  const auto& head = op.as<ops::LmHeadLoss>();
  if (r.tp > 1) throw std::logic_error("cuda backend: whole logits of a split vocabulary");
  const Allocation& m = r.memory;
  const int64_t N = r.graph.table[head.targets].numel(), C = r.spec.n_embd, Vp = r.spec.padded_vocab_size;
  const int64_t rows = r.graph.table[head.logits].numel() / Vp;
  const Workspace ws = workspace(m, head.matmul_scratch);
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    cuda::gemm(lt_, false, true, n, Vp, C, m.as<T>(head.inp) + r0 * C, C, weights<T>(m, op, head.weight), C,
               0.0f, m.f32(head.logits), Vp, ws.data, ws.bytes, stream_);
    copy_to_host(out + r0 * Vp, m.f32(head.logits), n * Vp * static_cast<int64_t>(sizeof(float)));
  }
}

// The head works a chunk of rows at a time, so the fp32 logits exist for one chunk; the loss's mean over the
// counted targets is added into the loss scalar on the device.
template <typename T, typename G>
void CudaBackend<T, G>::lm_head_loss(const Op& op, const OpRun& r) {
  const auto& a = op.as<ops::LmHeadLoss>();
  const TensorTable& table = r.graph.table;
  const Allocation& m = r.memory;
  if (a.row_stats >= 0) throw std::logic_error("cuda backend: " + op.name + ": a split vocabulary");
  const int64_t N = table[a.targets].numel(), C = r.spec.n_embd, Vp = table[a.weight].shape[0];
  const int64_t V = std::clamp<int64_t>(r.spec.vocab_size - a.vocab_begin, 0, Vp);
  const int64_t rows = table[a.logits].numel() / Vp;
  const int64_t counted = r.loss_targets;
  const uint8_t* loss_mask = a.loss_mask >= 0 ? m.u8(a.loss_mask) : nullptr;
  const Workspace ws = workspace(m, a.matmul_scratch);
  float* losses = m.f32(a.losses);
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    cuda::lm_head_loss_chunk<T, G>(
        lt_,
        {
            .x = m.as<T>(a.inp) + r0 * C,
            .wte = weights<T>(m, op, a.weight),
            .targets = m.i32(a.targets) + r0,
            .loss_mask = loss_mask ? loss_mask + r0 : nullptr,
            .logits = m.f32(a.logits),
            .dlogits = optional<T>(m, a.logits_grad),
            .losses = losses + r0,
            .dx = r.training ? m.as<T>(a.dinp) + r0 * C : nullptr,
            .dwte = r.training ? grad<G>(m, op, a.weight) : nullptr,
            .matmul_scratch = nullptr,  // cuBLASLt's workspace is passed beside the chunk
            .rows = n,
            .C = C,
            .V = V,
            .Vp = Vp,
            .grad_scale = r.grad_scale / static_cast<float>(std::max<int64_t>(counted, 1)),
        },
        ws.data, ws.bytes, stream_);
  }
  // A step without counted targets has loss 0 (and no gradient).
  if (counted > 0) cuda::add_mean_loss(m.as<double>(a.loss_sum), losses, N, counted, stream_);
}

template <typename T, typename G>
void CudaBackend<T, G>::backward(const Op& op, const OpRun& r) {
  const TensorTable& table = r.graph.table;
  const Allocation& m = r.memory;
  const ModelSpec& spec = r.spec;
  switch (op.kind()) {
    case OpKind::layernorm_backward: {
      const auto& a = op.as<ops::LayerNormBackward>();
      const int64_t C = table[a.weight].numel(), N = table[a.inp].numel() / C;
      cuda::layernorm_backward(m.as<T>(a.dinp), grad<G>(m, op, a.weight), grad<G>(m, op, a.bias),
                               m.as<T>(a.dout), m.as<T>(a.inp), weights<T>(m, op, a.weight), m.f32(a.mean),
                               m.f32(a.rstd), N, C, stream_);
      return;
    }
    case OpKind::rmsnorm_backward: {
      const auto& a = op.as<ops::RmsNormBackward>();
      const int64_t C = table[a.weight].numel(), N = table[a.inp].numel() / C;
      cuda::rmsnorm_backward(m.as<T>(a.dinp), grad<G>(m, op, a.weight), m.as<T>(a.dout), m.as<T>(a.inp),
                             weights<T>(m, op, a.weight), m.f32(a.rstd), N, C, stream_);
      return;
    }
    case OpKind::linear_backward:
      linear_backward(op, r);
      return;
    case OpKind::rope_backward: {
      const auto& a = op.as<ops::RopeBackward>();
      const TensorDesc& dqkv = table[a.dqkv];
      cuda::rope_backward(m.as<T>(a.dqkv), positions(m, a.positions), dqkv.shape[0], dqkv.shape[1],
                          qkv_layout(spec, r.tp), spec.rope_theta, stream_);
      return;
    }
    case OpKind::attention_backward: {
      const auto& a = op.as<ops::AttentionBackward>();
      const TensorDesc& qkv = table[a.qkv];
      cuda::attention_backward(m.as<T>(a.dqkv), m.as<T>(a.dout), m.as<T>(a.qkv), m.as<T>(a.out), m.f32(a.lse),
                               positions(m, a.positions), qkv.shape[0], qkv.shape[1], spec.n_embd / r.tp,
                               spec.n_head / r.tp, spec.n_kv_head / r.tp, optional<float>(m, a.scratch),
                               stream_);
      return;
    }
    case OpKind::gelu_backward: {
      const auto& a = op.as<ops::GeluBackward>();
      cuda::gelu_backward(m.as<T>(a.dinp), m.as<T>(a.inp), m.as<T>(a.dout), table[a.inp].numel(), stream_);
      return;
    }
    case OpKind::swiglu_backward: {
      const auto& a = op.as<ops::SwigluBackward>();
      const int64_t I = table[a.dout].shape[2];
      cuda::swiglu_backward(m.as<T>(a.dgate_up), m.as<T>(a.gate_up), m.as<T>(a.dout),
                            table[a.dout].numel() / I, I, stream_);
      return;
    }
    case OpKind::embedding_backward: {
      const auto& a = op.as<ops::EmbeddingBackward>();
      const TensorDesc& tokens = table[a.tokens];
      cuda::embedding_backward(grad<G>(m, op, a.wte), grad<G>(m, op, a.wpe), m.as<T>(a.dout), m.i32(a.tokens),
                               positions(m, a.positions), tokens.shape[0], tokens.shape[1], spec.n_embd,
                               a.wte >= 0 ? vocab_rows(table, a.wte, a.vocab_begin) : VocabRows{}, stream_);
      return;
    }
    case OpKind::lora_backward:
      lora_backward(op, r);
      return;
    default:
      throw std::logic_error("cuda backend: op " + op.name + " is not a kernel");
  }
}

template <typename T, typename G>
void CudaBackend<T, G>::run(const Op& op, const OpRun& r) {
  const TensorTable& table = r.graph.table;
  const Allocation& m = r.memory;
  const ModelSpec& spec = r.spec;
  switch (op.kind()) {
    case OpKind::embedding: {
      const auto& a = op.as<ops::Embedding>();
      const TensorDesc& tokens = table[a.tokens];
      cuda::embedding_forward(m.as<T>(a.out), m.i32(a.tokens), positions(m, a.positions),
                              weights<T>(m, op, a.wte), weights<T>(m, op, a.wpe), tokens.shape[0],
                              tokens.shape[1], spec.n_embd, vocab_rows(table, a.wte, a.vocab_begin), stream_);
      return;
    }
    case OpKind::layernorm: {
      const auto& a = op.as<ops::LayerNorm>();
      const int64_t C = table[a.weight].numel(), N = table[a.inp].numel() / C;
      cuda::layernorm_forward(m.as<T>(a.out), m.f32(a.mean), m.f32(a.rstd), m.as<T>(a.inp),
                              weights<T>(m, op, a.weight), weights<T>(m, op, a.bias), N, C, spec.ln_eps,
                              stream_);
      return;
    }
    case OpKind::rmsnorm: {
      const auto& a = op.as<ops::RmsNorm>();
      const int64_t C = table[a.weight].numel(), N = table[a.inp].numel() / C;
      cuda::rmsnorm_forward(m.as<T>(a.out), m.f32(a.rstd), m.as<T>(a.inp), weights<T>(m, op, a.weight), N, C,
                            spec.ln_eps, stream_);
      return;
    }
    case OpKind::linear:
      linear(op, r);
      return;
    case OpKind::rope: {
      const auto& a = op.as<ops::Rope>();
      const TensorDesc& qkv = table[a.qkv];
      cuda::rope_forward(m.as<T>(a.qkv), positions(m, a.positions), qkv.shape[0], qkv.shape[1],
                         qkv_layout(spec, r.tp), spec.rope_theta, stream_);
      return;
    }
    case OpKind::attention: {
      const auto& a = op.as<ops::Attention>();
      const TensorDesc& qkv = table[a.qkv];
      cuda::attention_forward(m.as<T>(a.out), m.f32(a.lse), m.as<T>(a.qkv), positions(m, a.positions),
                              qkv.shape[0], qkv.shape[1], spec.n_embd / r.tp, spec.n_head / r.tp,
                              spec.n_kv_head / r.tp, optional<float>(m, a.scratch), stream_);
      return;
    }
    case OpKind::gelu: {
      const auto& a = op.as<ops::Gelu>();
      cuda::gelu_forward(m.as<T>(a.out), m.as<T>(a.inp), table[a.inp].numel(), stream_);
      return;
    }
    case OpKind::swiglu: {
      const auto& a = op.as<ops::Swiglu>();
      const int64_t I = table[a.out].shape[2];
      cuda::swiglu_forward(m.as<T>(a.out), m.as<T>(a.gate_up), table[a.out].numel() / I, I, stream_);
      return;
    }
    case OpKind::lm_head_loss:
      lm_head_loss(op, r);
      return;
    case OpKind::lora:
      lora(op, r);
      return;
    case OpKind::zero: {
      const auto& a = op.as<ops::Zero>();
      MT_CUDA_CHECK("zero", cudaMemsetAsync(m.data(a.out), 0, table[a.out].bytes(), stream_));
      return;
    }
    case OpKind::all_reduce:
    case OpKind::all_gather:
    case OpKind::reduce_scatter:
    case OpKind::pipe_exchange:
      throw std::logic_error("cuda backend: op " + op.name + " is the executor's");
    default:
      backward(op, r);
      return;
  }
}

}  // namespace

std::unique_ptr<Backend> make_cuda_runner(const GpuTarget& target, const ModelStatePolicy& p) {
  if (p.weights == DType::f32 && p.grads == DType::f32)
    return std::make_unique<CudaBackend<float, float>>(target);
  if (p.weights == DType::bf16 && p.grads == DType::f32)
    return std::make_unique<CudaBackend<bf16, float>>(target);
  if (p.weights == DType::bf16 && p.grads == DType::bf16)
    return std::make_unique<CudaBackend<bf16, bf16>>(target);
  if (p.weights == DType::f16 && p.grads == DType::f32)
    return std::make_unique<CudaBackend<f16, float>>(target);
  throw std::logic_error("cuda backend: no kernels for weights " + std::string(dtype_name(p.weights)) +
                         " with gradients " + std::string(dtype_name(p.grads)));
}

}  // namespace mt
