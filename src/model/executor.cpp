#include "model/executor.h"

#include <algorithm>
#include <cstring>

#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/cross_entropy.h"
#include "kernels/embedding.h"
#include "kernels/layernorm.h"
#include "kernels/matmul.h"

namespace mt {

double Executor::run_ops(int end, bool training, float grad_scale) {
  double loss_sum = 0;
  for (int i = 0; i < end; ++i) {
    memory_.begin_op(i);
    run(graph_.ops[i], training, grad_scale, loss_sum);
    memory_.end_op(i);
  }
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

void Executor::forward_logits(float* logits) {
  run_ops(graph_.loss_op, /*training=*/false, 0.0f);
  const Op& head = graph_.ops[graph_.loss_op];
  memory_.begin_op(graph_.loss_op);  // binds the head's input as the loss op would
  const int64_t N = graph_.table[head.labels].numel(), C = spec_.n_embd, Vp = spec_.padded_vocab_size;
  kernels::gemm(false, true, N, Vp, C, memory_.f32(head.inp), C, memory_.f32(head.weight), C, 0.0f, logits,
                Vp, nullptr);
  memory_.reset_arenas();
}

void Executor::lm_head_loss(const Op& op, bool training, float grad_scale, double& loss_sum) {
  const TensorTable& table = graph_.table;
  const int64_t N = table[op.labels].numel(), C = spec_.n_embd, Vp = spec_.padded_vocab_size;
  const int64_t rows = table[op.scratch].numel() / Vp;
  const float* x = memory_.f32(op.inp);
  const float* wte = memory_.f32(op.weight);
  const int32_t* targets = memory_.i32(op.labels);
  float* logits = memory_.f32(op.scratch);
  float* losses = memory_.f32(op.stat0);
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    kernels::gemm(false, true, n, Vp, C, x + r0 * C, C, wte, C, 0.0f, logits, Vp, nullptr);
    kernels::softmax_cross_entropy(logits, losses + r0, targets + r0, n, spec_.vocab_size, Vp, training,
                                   grad_scale / static_cast<float>(N));
    if (!training) continue;
    kernels::gemm(false, false, n, C, Vp, logits, Vp, wte, C, 0.0f, memory_.f32(op.dinp) + r0 * C, C,
                  nullptr);
    kernels::gemm(true, false, Vp, C, n, logits, Vp, x + r0 * C, C, 1.0f, memory_.grad(op.weight), C,
                  nullptr);
  }
  for (int64_t i = 0; i < N; ++i) loss_sum += losses[i];
}

void Executor::run(const Op& op, bool training, float grad_scale, double& loss_sum) {
  const TensorTable& table = graph_.table;
  const Allocation& m = memory_;
  switch (op.kind) {
    case OpKind::embedding: {
      const TensorDesc& tokens = table[op.labels];
      kernels::embedding_forward(m.f32(op.out), m.i32(op.labels), m.f32(op.weight), m.f32(op.bias),
                                 tokens.shape[0], tokens.shape[1], spec_.n_embd);
      return;
    }
    case OpKind::layernorm: {
      const int64_t C = table[op.weight].numel(), N = table[op.inp].numel() / C;
      kernels::layernorm_forward(m.f32(op.out), m.f32(op.stat0), m.f32(op.stat1), m.f32(op.inp),
                                 m.f32(op.weight), m.f32(op.bias), N, C, spec_.ln_eps);
      return;
    }
    case OpKind::linear: {
      const int64_t in = table[op.weight].shape[0], out = table[op.weight].shape[1];
      const int64_t M = table[op.inp].numel() / in;
      if (op.residual >= 0) std::memcpy(m.f32(op.out), m.f32(op.residual), table[op.out].bytes());
      kernels::linear_forward(m.f32(op.out), m.f32(op.inp), m.f32(op.weight), m.f32(op.bias), M, in, out,
                              op.residual >= 0, nullptr);
      return;
    }
    case OpKind::attention: {
      const TensorDesc& qkv = table[op.inp];
      kernels::attention_forward(m.f32(op.out), m.f32(op.stat0), m.f32(op.inp), qkv.shape[0], qkv.shape[1],
                                 qkv.shape[2] / 3, table[op.stat0].shape[1], m.f32(op.scratch));
      return;
    }
    case OpKind::gelu:
      kernels::gelu_forward(m.f32(op.out), m.f32(op.inp), table[op.inp].numel());
      return;
    case OpKind::lm_head_loss:
      lm_head_loss(op, training, grad_scale, loss_sum);
      return;
    case OpKind::zero:
      std::memset(m.data(op.out), 0, table[op.out].bytes());
      return;
    case OpKind::layernorm_backward: {
      const int64_t C = table[op.weight].numel(), N = table[op.inp].numel() / C;
      kernels::layernorm_backward(m.f32(op.dinp), m.grad(op.weight), m.grad(op.bias), m.f32(op.dout),
                                  m.f32(op.inp), m.f32(op.weight), m.f32(op.stat0), m.f32(op.stat1), N, C);
      return;
    }
    case OpKind::linear_backward: {
      const int64_t in = table[op.weight].shape[0], out = table[op.weight].shape[1];
      const int64_t M = table[op.inp].numel() / in;
      kernels::linear_backward(m.f32(op.dinp), m.grad(op.weight), m.grad(op.bias), m.f32(op.dout),
                               m.f32(op.inp), m.f32(op.weight), M, in, out, op.accumulate, nullptr);
      return;
    }
    case OpKind::attention_backward: {
      const TensorDesc& qkv = table[op.inp];
      kernels::attention_backward(m.f32(op.dinp), m.f32(op.dout), m.f32(op.inp), m.f32(op.out),
                                  m.f32(op.stat0), qkv.shape[0], qkv.shape[1], qkv.shape[2] / 3,
                                  table[op.stat0].shape[1], m.f32(op.scratch));
      return;
    }
    case OpKind::gelu_backward:
      kernels::gelu_backward(m.f32(op.dinp), m.f32(op.inp), m.f32(op.dout), table[op.inp].numel());
      return;
    case OpKind::embedding_backward: {
      const TensorDesc& tokens = table[op.labels];
      kernels::embedding_backward(m.grad(op.weight), m.grad(op.bias), m.f32(op.dout), m.i32(op.labels),
                                  tokens.shape[0], tokens.shape[1], spec_.n_embd);
      return;
    }
  }
}

}  // namespace mt
