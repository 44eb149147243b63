#include "exec/executor.h"

#include <omp.h>

#include <algorithm>
#include <stdexcept>

#include "exec/cpu_backend.h"

namespace mt {

int64_t counted_targets(const ops::LmHeadLoss& head, const TensorTable& table, const Allocation& memory) {
  const int64_t n = table[head.targets].numel();
  if (head.loss_mask < 0) return n;
  const auto* mask = memory.u8(head.loss_mask);
  return std::count(mask, mask + n, uint8_t{1});
}

Executor::Executor(const ModelSpec& spec, const Graph& graph, Allocation& memory)
    : spec_(spec), graph_(graph), memory_(memory), backend_(make_cpu_backend(memory.plan().policy)) {}

void Executor::check_groups() const {
  // Kernels index their scratch by OpenMP thread number: more threads than planned would write past it.
  if (omp_get_max_threads() > graph_.threads)
    throw std::logic_error("executor: the plan sized kernel scratch for " + std::to_string(graph_.threads) +
                           " threads, but OpenMP runs " + std::to_string(omp_get_max_threads()));
  // The backend reads this rank's heads off the group's size: another size would misread the split tensors.
  if (const int group = tensor_group_ ? tensor_group_->size() : 1; group != graph_.tp)
    throw std::logic_error("executor: the graph is split over " + std::to_string(graph_.tp) +
                           " tensor-parallel ranks, but runs in a group of " + std::to_string(group));
  if (const int stages = pipeline_ ? pipeline_->size() : 1; stages != graph_.pp)
    throw std::logic_error("executor: the graph is a stage of " + std::to_string(graph_.pp) +
                           " pipeline stages, but runs among " + std::to_string(stages));
}

OpRun Executor::op_run(bool training, float grad_scale, uint64_t draw) const {
  return {spec_, graph_, memory_, training, grad_scale, draw, tensor_group_, pipeline_};
}

double Executor::run_ops(int end, bool training, float grad_scale, uint64_t draw) {
  check_groups();
  const OpRun run = op_run(training, grad_scale, draw);
  double mean_losses = 0;
  for (int i = 0; i < end; ++i) {
    memory_.begin_op(i);
    if (hooks_) hooks_->before(i, training);
    const Op& op = graph_.ops[i];
    const double loss_sum = backend_->run(op, run);
    // A batch without counted targets has loss 0 (and no gradient).
    if (op.kind() == OpKind::lm_head_loss)
      if (const int64_t counted = counted_targets(op.as<ops::LmHeadLoss>(), graph_.table, memory_);
          counted > 0)
        mean_losses += loss_sum / static_cast<double>(counted);
    if (observer_) observer_(i);
    if (hooks_) hooks_->after(i, training);
    memory_.end_op(i);
  }
  if (hooks_) hooks_->end_pass();
  return mean_losses;
}

StepResult Executor::train_step(float grad_scale, uint64_t draw) {
  return {run_ops(static_cast<int>(graph_.ops.size()), /*training=*/true, grad_scale, draw)};
}

StepResult Executor::eval_step() {
  const double loss = run_ops(graph_.forward_end, /*training=*/false, 0.0f);
  memory_.reset_arenas();  // tensors kept for a backward that does not come
  return {loss};
}

void Executor::forward_logits(float* out) {
  if (graph_.pp > 1) throw std::logic_error("executor: whole logits of a pipeline stage");
  run_ops(graph_.loss_op, /*training=*/false, 0.0f);
  const Op& head = graph_.ops[graph_.loss_op];
  memory_.begin_op(graph_.loss_op);  // binds the head's input (and ZeRO-3 weights) as the loss op would
  if (hooks_) hooks_->before(graph_.loss_op, /*training=*/false);
  backend_->logits(head, op_run(/*training=*/false, 0.0f, 0), out);
  if (hooks_) hooks_->end_pass();
  memory_.reset_arenas();
}

}  // namespace mt
