#include "model/executor.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/embedding.h"
#include "kernels/layernorm.h"
#include "kernels/lm_head.h"
#include "kernels/matmul.h"
#include "kernels/rope.h"

namespace mt {

Executor::Executor(const ModelSpec& spec, const Graph& graph, Allocation& memory)
    : spec_(spec), graph_(graph), memory_(memory) {
  const ModelStatePolicy& p = memory.plan().policy;
  if (p.weights == DType::f32 && p.grads == DType::f32) {
    run_op_ = &Executor::run<float, float>;
    logits_ = &Executor::logits<float>;
  } else if (p.weights == DType::bf16 && p.grads == DType::f32) {
    run_op_ = &Executor::run<bf16, float>;
    logits_ = &Executor::logits<bf16>;
  } else if (p.weights == DType::bf16 && p.grads == DType::bf16) {
    run_op_ = &Executor::run<bf16, bf16>;
    logits_ = &Executor::logits<bf16>;
  } else if (p.weights == DType::f16 && p.grads == DType::f32) {
    run_op_ = &Executor::run<f16, float>;
    logits_ = &Executor::logits<f16>;
  } else {
    throw std::logic_error("executor: no kernels for weights " + std::string(dtype_name(p.weights)) +
                           " with gradients " + std::string(dtype_name(p.grads)));
  }
}

double Executor::run_ops(int end, bool training, float grad_scale) {
  // Kernels index their scratch by OpenMP thread number: more threads than planned would write past it.
  if (omp_get_max_threads() > graph_.threads)
    throw std::logic_error("executor: the plan sized kernel scratch for " + std::to_string(graph_.threads) +
                           " threads, but OpenMP runs " + std::to_string(omp_get_max_threads()));
  double loss_sum = 0;
  for (int i = 0; i < end; ++i) {
    memory_.begin_op(i);
    if (hooks_) hooks_->before(i, training);
    (this->*run_op_)(graph_.ops[i], training, grad_scale, loss_sum);
    if (observer_) observer_(i);
    if (hooks_) hooks_->after(i, training);
    memory_.end_op(i);
  }
  if (hooks_) hooks_->end_pass();
  return loss_sum;
}

double Executor::mean_loss(double loss_sum) const {
  const ops::LmHeadLoss& head = graph_.ops[graph_.loss_op].as<ops::LmHeadLoss>();
  return loss_sum / static_cast<double>(graph_.table[head.targets].numel());
}

StepResult Executor::train_step(float grad_scale) {
  return {mean_loss(run_ops(static_cast<int>(graph_.ops.size()), /*training=*/true, grad_scale))};
}

StepResult Executor::eval_step() {
  const double loss_sum = run_ops(graph_.loss_op + 1, /*training=*/false, 0.0f);
  memory_.reset_arenas();  // tensors kept for a backward that does not come
  return {mean_loss(loss_sum)};
}

void Executor::forward_logits(float* out) {
  run_ops(graph_.loss_op, /*training=*/false, 0.0f);
  const Op& head = graph_.ops[graph_.loss_op];
  memory_.begin_op(graph_.loss_op);  // binds the head's input (and ZeRO-3 weights) as the loss op would
  if (hooks_) hooks_->before(graph_.loss_op, /*training=*/false);
  (this->*logits_)(head, out);
  if (hooks_) hooks_->end_pass();
  memory_.reset_arenas();
}

template <typename T>
void Executor::logits(const Op& op, float* out) {
  const ops::LmHeadLoss& head = op.as<ops::LmHeadLoss>();
  const int64_t N = graph_.table[head.targets].numel(), C = spec_.n_embd, Vp = spec_.padded_vocab_size;
  kernels::gemm(false, true, N, Vp, C, memory_.as<T>(head.inp), C, weights<T>(op, head.weight), C, 0.0f, out,
                Vp, optional<float>(head.matmul_scratch));
}

// The head works a chunk of rows at a time (kernels/lm_head.h), so the fp32 logits exist for one chunk.
template <typename T, typename G>
void Executor::lm_head_loss(const Op& op, bool training, float grad_scale, double& loss_sum) {
  const ops::LmHeadLoss& a = op.as<ops::LmHeadLoss>();
  const TensorTable& table = graph_.table;
  const int64_t N = table[a.targets].numel(), C = spec_.n_embd, Vp = spec_.padded_vocab_size;
  const int64_t rows = table[a.logits].numel() / Vp;
  float* losses = memory_.f32(a.losses);
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    kernels::lm_head_loss_chunk<T, G>({
        .x = memory_.as<T>(a.inp) + r0 * C,
        .wte = weights<T>(op, a.weight),
        .targets = memory_.i32(a.targets) + r0,
        .logits = memory_.f32(a.logits),
        .dlogits = optional<T>(a.logits_grad),
        .losses = losses + r0,
        .dx = training ? memory_.as<T>(a.dinp) + r0 * C : nullptr,
        .dwte = training ? grad<G>(op, a.weight) : nullptr,
        .matmul_scratch = optional<float>(a.matmul_scratch),
        .rows = n,
        .C = C,
        .V = spec_.vocab_size,
        .Vp = Vp,
        .grad_scale = grad_scale / static_cast<float>(N),
    });
  }
  for (int64_t i = 0; i < N; ++i) loss_sum += losses[i];
}

Executor::LinearShape Executor::linear_shape(int inp, int weight, bool weight_out_in) const {
  const TensorDesc& w = graph_.table[weight];
  const int64_t in = w.shape[weight_out_in ? 1 : 0], out = w.shape[weight_out_in ? 0 : 1];
  return {graph_.table[inp].numel() / in, in, out,
          weight_out_in ? kernels::WeightLayout::out_in : kernels::WeightLayout::in_out};
}

kernels::QkvLayout Executor::qkv_layout() const {
  return {spec_.n_embd, spec_.n_head, spec_.n_kv_head};
}

// One case per kind: its operands, its shape from the table, its kernel.
template <typename T, typename G>
void Executor::run(const Op& op, bool training, float grad_scale, double& loss_sum) {
  const TensorTable& table = graph_.table;
  const Allocation& m = memory_;
  switch (op.kind()) {
    case OpKind::embedding: {
      const auto& a = op.as<ops::Embedding>();
      const TensorDesc& tokens = table[a.tokens];
      kernels::embedding_forward(m.as<T>(a.out), m.i32(a.tokens), weights<T>(op, a.wte),
                                 weights<T>(op, a.wpe), tokens.shape[0], tokens.shape[1], spec_.n_embd);
      return;
    }
    case OpKind::layernorm: {
      const auto& a = op.as<ops::LayerNorm>();
      const int64_t C = table[a.weight].numel(), N = table[a.inp].numel() / C;
      kernels::layernorm_forward(m.as<T>(a.out), m.f32(a.mean), m.f32(a.rstd), m.as<T>(a.inp),
                                 weights<T>(op, a.weight), weights<T>(op, a.bias), N, C, spec_.ln_eps);
      return;
    }
    case OpKind::rmsnorm: {
      const auto& a = op.as<ops::RmsNorm>();
      const int64_t C = table[a.weight].numel(), N = table[a.inp].numel() / C;
      kernels::rmsnorm_forward(m.as<T>(a.out), m.f32(a.rstd), m.as<T>(a.inp), weights<T>(op, a.weight), N, C,
                               spec_.ln_eps);
      return;
    }
    case OpKind::linear: {
      const auto& a = op.as<ops::Linear>();
      const LinearShape s = linear_shape(a.inp, a.weight, a.weight_out_in);
      if (a.residual >= 0) std::memcpy(m.data(a.out), m.data(a.residual), table[a.out].bytes());
      kernels::linear_forward(m.as<T>(a.out), m.as<T>(a.inp), weights<T>(op, a.weight),
                              weights<T>(op, a.bias), s.M, s.in, s.out, a.residual >= 0,
                              optional<float>(a.matmul_scratch), s.layout);
      return;
    }
    case OpKind::rope: {
      const auto& a = op.as<ops::Rope>();
      const TensorDesc& qkv = table[a.qkv];
      kernels::rope_forward(m.as<T>(a.qkv), qkv.shape[0], qkv.shape[1], qkv_layout(), spec_.rope_theta);
      return;
    }
    case OpKind::attention: {
      const auto& a = op.as<ops::Attention>();
      const TensorDesc& qkv = table[a.qkv];
      kernels::attention_forward(m.as<T>(a.out), m.f32(a.lse), m.as<T>(a.qkv), qkv.shape[0], qkv.shape[1],
                                 spec_.n_embd, spec_.n_head, spec_.n_kv_head, m.f32(a.scratch));
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
      lm_head_loss<T, G>(op, training, grad_scale, loss_sum);
      return;
    case OpKind::zero: {
      const auto& a = op.as<ops::Zero>();
      std::memset(m.data(a.out), 0, table[a.out].bytes());
      return;
    }
    case OpKind::layernorm_backward: {
      const auto& a = op.as<ops::LayerNormBackward>();
      const int64_t C = table[a.weight].numel(), N = table[a.inp].numel() / C;
      kernels::layernorm_backward(m.as<T>(a.dinp), grad<G>(op, a.weight), grad<G>(op, a.bias),
                                  m.as<T>(a.dout), m.as<T>(a.inp), weights<T>(op, a.weight), m.f32(a.mean),
                                  m.f32(a.rstd), N, C);
      return;
    }
    case OpKind::rmsnorm_backward: {
      const auto& a = op.as<ops::RmsNormBackward>();
      const int64_t C = table[a.weight].numel(), N = table[a.inp].numel() / C;
      kernels::rmsnorm_backward(m.as<T>(a.dinp), grad<G>(op, a.weight), m.as<T>(a.dout), m.as<T>(a.inp),
                                weights<T>(op, a.weight), m.f32(a.rstd), N, C);
      return;
    }
    case OpKind::linear_backward: {
      const auto& a = op.as<ops::LinearBackward>();
      const LinearShape s = linear_shape(a.inp, a.weight, a.weight_out_in);
      kernels::linear_backward(m.as<T>(a.dinp), grad<G>(op, a.weight), grad<G>(op, a.bias), m.as<T>(a.dout),
                               m.as<T>(a.inp), weights<T>(op, a.weight), s.M, s.in, s.out, a.accumulate,
                               optional<float>(a.matmul_scratch), s.layout);
      return;
    }
    case OpKind::rope_backward: {
      const auto& a = op.as<ops::RopeBackward>();
      const TensorDesc& dqkv = table[a.dqkv];
      kernels::rope_backward(m.as<T>(a.dqkv), dqkv.shape[0], dqkv.shape[1], qkv_layout(), spec_.rope_theta);
      return;
    }
    case OpKind::attention_backward: {
      const auto& a = op.as<ops::AttentionBackward>();
      const TensorDesc& qkv = table[a.qkv];
      kernels::attention_backward(m.as<T>(a.dqkv), m.as<T>(a.dout), m.as<T>(a.qkv), m.as<T>(a.out),
                                  m.f32(a.lse), qkv.shape[0], qkv.shape[1], spec_.n_embd, spec_.n_head,
                                  spec_.n_kv_head, m.f32(a.scratch));
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
      kernels::embedding_backward(grad<G>(op, a.wte), grad<G>(op, a.wpe), m.as<T>(a.dout), m.i32(a.tokens),
                                  tokens.shape[0], tokens.shape[1], spec_.n_embd);
      return;
    }
  }
}

}  // namespace mt
