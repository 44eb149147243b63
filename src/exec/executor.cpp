#include "exec/executor.h"

#include <omp.h>

#include <stdexcept>

#include "exec/cpu_backend.h"

namespace mt {

Executor::Executor(const ModelSpec& spec, const Graph& graph, Allocation& memory)
    : spec_(spec), graph_(graph), memory_(memory), backend_(make_cpu_backend(memory.plan().policy)) {}

double Executor::run_ops(int end, bool training, float grad_scale, uint64_t draw) {
  // Kernels index their scratch by OpenMP thread number: more threads than planned would write past it.
  if (omp_get_max_threads() > graph_.threads)
    throw std::logic_error("executor: the plan sized kernel scratch for " + std::to_string(graph_.threads) +
                           " threads, but OpenMP runs " + std::to_string(omp_get_max_threads()));
  double loss_sum = 0;
  for (int i = 0; i < end; ++i) {
    memory_.begin_op(i);
    if (hooks_) hooks_->before(i, training);
    loss_sum += backend_->run(graph_.ops[i], {spec_, graph_, memory_, training, grad_scale, draw});
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

StepResult Executor::train_step(float grad_scale, uint64_t draw) {
  return {mean_loss(run_ops(static_cast<int>(graph_.ops.size()), /*training=*/true, grad_scale, draw))};
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
  backend_->logits(head, {spec_, graph_, memory_, /*training=*/false, 0.0f}, out);
  if (hooks_) hooks_->end_pass();
  memory_.reset_arenas();
}

}  // namespace mt
