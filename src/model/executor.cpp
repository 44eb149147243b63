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
  return loss_sum / static_cast<double>(graph_.table[graph_.ops[graph_.loss_op].labels].numel());
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
void Executor::logits(const Op& head, float* out) {
  const int64_t N = graph_.table[head.labels].numel(), C = spec_.n_embd, Vp = spec_.padded_vocab_size;
  float* mm = head.matmul_scratch >= 0 ? memory_.f32(head.matmul_scratch) : nullptr;
  kernels::gemm(false, true, N, Vp, C, memory_.as<T>(head.inp), C, memory_.as<T>(head.weight), C, 0.0f, out,
                Vp, mm);
}

// The head works a chunk of rows at a time (kernels/lm_head.h), so the fp32 logits exist for one chunk.
template <typename T, typename G>
void Executor::lm_head_loss(const Op& op, bool training, float grad_scale, double& loss_sum) {
  const TensorTable& table = graph_.table;
  const int64_t N = table[op.labels].numel(), C = spec_.n_embd, Vp = spec_.padded_vocab_size;
  const int64_t rows = table[op.scratch].numel() / Vp;
  float* losses = memory_.f32(op.stat0);
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    kernels::lm_head_loss_chunk<T, G>({
        .x = memory_.as<T>(op.inp) + r0 * C,
        .wte = memory_.as<T>(op.weight),
        .targets = memory_.i32(op.labels) + r0,
        .logits = memory_.f32(op.scratch),
        .dlogits = op.dscratch >= 0 ? memory_.as<T>(op.dscratch) : nullptr,
        .losses = losses + r0,
        .dx = training ? memory_.as<T>(op.dinp) + r0 * C : nullptr,
        .dwte = training ? memory_.grad<G>(op.weight) : nullptr,
        .matmul_scratch = op.matmul_scratch >= 0 ? memory_.f32(op.matmul_scratch) : nullptr,
        .rows = n,
        .C = C,
        .V = spec_.vocab_size,
        .Vp = Vp,
        .grad_scale = grad_scale / static_cast<float>(N),
    });
  }
  for (int64_t i = 0; i < N; ++i) loss_sum += losses[i];
}

Executor::LinearShape Executor::linear_shape(const Op& op) const {
  const TensorDesc& w = graph_.table[op.weight];
  const int64_t in = w.shape[op.weight_out_in ? 1 : 0], out = w.shape[op.weight_out_in ? 0 : 1];
  return {graph_.table[op.inp].numel() / in, in, out,
          op.weight_out_in ? kernels::WeightLayout::out_in : kernels::WeightLayout::in_out};
}

kernels::QkvLayout Executor::qkv_layout() const {
  return {spec_.n_embd, spec_.n_head, spec_.n_kv_head};
}

template <typename T, typename G>
void Executor::run(const Op& op, bool training, float grad_scale, double& loss_sum) {
  const TensorTable& table = graph_.table;
  const Allocation& m = memory_;
  float* mm = op.matmul_scratch >= 0 ? m.f32(op.matmul_scratch) : nullptr;
  switch (op.kind) {
    case OpKind::embedding: {
      const TensorDesc& tokens = table[op.labels];
      kernels::embedding_forward(m.as<T>(op.out), m.i32(op.labels), m.as<T>(op.weight), optional<T>(op.bias),
                                 tokens.shape[0], tokens.shape[1], spec_.n_embd);
      return;
    }
    case OpKind::layernorm: {
      const int64_t C = table[op.weight].numel(), N = table[op.inp].numel() / C;
      kernels::layernorm_forward(m.as<T>(op.out), m.f32(op.stat0), m.f32(op.stat1), m.as<T>(op.inp),
                                 m.as<T>(op.weight), m.as<T>(op.bias), N, C, spec_.ln_eps);
      return;
    }
    case OpKind::rmsnorm: {
      const int64_t C = table[op.weight].numel(), N = table[op.inp].numel() / C;
      kernels::rmsnorm_forward(m.as<T>(op.out), m.f32(op.stat1), m.as<T>(op.inp), m.as<T>(op.weight), N, C,
                               spec_.ln_eps);
      return;
    }
    case OpKind::linear: {
      const LinearShape s = linear_shape(op);
      if (op.residual >= 0) std::memcpy(m.data(op.out), m.data(op.residual), table[op.out].bytes());
      kernels::linear_forward(m.as<T>(op.out), m.as<T>(op.inp), m.as<T>(op.weight), optional<T>(op.bias), s.M,
                              s.in, s.out, op.residual >= 0, mm, s.layout);
      return;
    }
    case OpKind::rope: {
      const TensorDesc& qkv = table[op.out];
      kernels::rope_forward(m.as<T>(op.out), qkv.shape[0], qkv.shape[1], qkv_layout(), spec_.rope_theta);
      return;
    }
    case OpKind::attention: {
      const TensorDesc& qkv = table[op.inp];
      kernels::attention_forward(m.as<T>(op.out), m.f32(op.stat0), m.as<T>(op.inp), qkv.shape[0],
                                 qkv.shape[1], spec_.n_embd, spec_.n_head, spec_.n_kv_head,
                                 m.f32(op.scratch));
      return;
    }
    case OpKind::gelu:
      kernels::gelu_forward(m.as<T>(op.out), m.as<T>(op.inp), table[op.inp].numel());
      return;
    case OpKind::swiglu: {
      const int64_t I = table[op.out].shape[2];
      kernels::swiglu_forward(m.as<T>(op.out), m.as<T>(op.inp), table[op.out].numel() / I, I);
      return;
    }
    case OpKind::lm_head_loss:
      lm_head_loss<T, G>(op, training, grad_scale, loss_sum);
      return;
    case OpKind::zero:
      std::memset(m.data(op.out), 0, table[op.out].bytes());
      return;
    case OpKind::layernorm_backward: {
      const int64_t C = table[op.weight].numel(), N = table[op.inp].numel() / C;
      kernels::layernorm_backward(m.as<T>(op.dinp), m.grad<G>(op.weight), m.grad<G>(op.bias),
                                  m.as<T>(op.dout), m.as<T>(op.inp), m.as<T>(op.weight), m.f32(op.stat0),
                                  m.f32(op.stat1), N, C);
      return;
    }
    case OpKind::rmsnorm_backward: {
      const int64_t C = table[op.weight].numel(), N = table[op.inp].numel() / C;
      kernels::rmsnorm_backward(m.as<T>(op.dinp), m.grad<G>(op.weight), m.as<T>(op.dout), m.as<T>(op.inp),
                                m.as<T>(op.weight), m.f32(op.stat1), N, C);
      return;
    }
    case OpKind::linear_backward: {
      const LinearShape s = linear_shape(op);
      kernels::linear_backward(m.as<T>(op.dinp), m.grad<G>(op.weight), optional_grad<G>(op.bias),
                               m.as<T>(op.dout), m.as<T>(op.inp), m.as<T>(op.weight), s.M, s.in, s.out,
                               op.accumulate, mm, s.layout);
      return;
    }
    case OpKind::rope_backward: {
      const TensorDesc& dqkv = table[op.dinp];
      kernels::rope_backward(m.as<T>(op.dinp), dqkv.shape[0], dqkv.shape[1], qkv_layout(), spec_.rope_theta);
      return;
    }
    case OpKind::attention_backward: {
      const TensorDesc& qkv = table[op.inp];
      kernels::attention_backward(m.as<T>(op.dinp), m.as<T>(op.dout), m.as<T>(op.inp), m.as<T>(op.out),
                                  m.f32(op.stat0), qkv.shape[0], qkv.shape[1], spec_.n_embd, spec_.n_head,
                                  spec_.n_kv_head, m.f32(op.scratch));
      return;
    }
    case OpKind::gelu_backward:
      kernels::gelu_backward(m.as<T>(op.dinp), m.as<T>(op.inp), m.as<T>(op.dout), table[op.inp].numel());
      return;
    case OpKind::swiglu_backward: {
      const int64_t I = table[op.dout].shape[2];
      kernels::swiglu_backward(m.as<T>(op.dinp), m.as<T>(op.inp), m.as<T>(op.dout),
                               table[op.dout].numel() / I, I);
      return;
    }
    case OpKind::embedding_backward: {
      const TensorDesc& tokens = table[op.labels];
      kernels::embedding_backward(m.grad<G>(op.weight), optional_grad<G>(op.bias), m.as<T>(op.dout),
                                  m.i32(op.labels), tokens.shape[0], tokens.shape[1], spec_.n_embd);
      return;
    }
  }
}

}  // namespace mt
