#include "exec/executor.h"

#include <stdexcept>
#include <string>

namespace mt {

bool is_collective(OpKind kind) {
  switch (kind) {
    case OpKind::all_reduce:
    case OpKind::all_gather:
    case OpKind::reduce_scatter:
    case OpKind::pipe_exchange:
      return true;
    default:
      return false;
  }
}

Executor::Executor(const ModelSpec& spec, const Graph& graph, Allocation& memory, Backend& backend)
    : spec_(spec), graph_(graph), memory_(memory), backend_(backend) {
  if (&memory.device() != &backend)
    throw std::logic_error("executor: the allocation's buffers are another device's");
}

void Executor::check_groups() const {
  // The backend reads this rank's heads off the group's size: another size would misread the split tensors.
  if (const int group = tensor_group_ ? tensor_group_->size() : 1; group != graph_.tp)
    throw std::logic_error("executor: the graph is split over " + std::to_string(graph_.tp) +
                           " tensor-parallel ranks, but runs in a group of " + std::to_string(group));
  if (const int stages = pipeline_ ? pipeline_->size() : 1; stages != graph_.pp)
    throw std::logic_error("executor: the graph is a stage of " + std::to_string(graph_.pp) +
                           " pipeline stages, but runs among " + std::to_string(stages));
}

OpRun Executor::op_run(bool training, float grad_scale, uint64_t first_sample, int64_t loss_targets) const {
  OpRun run{spec_, graph_, memory_, training, grad_scale, first_sample, loss_targets};
  if (tensor_group_) {
    Communicator& group = *tensor_group_;
    run.tp = group.size();
    run.tp_rank = group.rank();
    run.gather_row_stats = [&group](float* stats, int64_t floats) {
      group.all_gather(stats + group.rank() * floats, stats, floats, DType::f32);
    };
  }
  return run;
}

Communicator& Executor::tensor_group(const Op& op) const {
  if (!tensor_group_) throw std::logic_error("executor: " + op.name + " without a tensor-parallel group");
  return *tensor_group_;
}

void Executor::run_collective(const Op& op) {
  const TensorTable& table = graph_.table;
  const Allocation& m = memory_;
  switch (op.kind()) {
    case OpKind::all_reduce: {
      const auto& a = op.as<ops::AllReduce>();
      tensor_group(op).all_reduce_sum(m.data(a.data), table[a.data].numel(), table[a.data].dtype);
      return;
    }
    case OpKind::all_gather: {
      const auto& a = op.as<ops::AllGather>();
      tensor_group(op).all_gather(m.data(a.inp), m.data(a.out), table[a.inp].numel(), table[a.inp].dtype);
      return;
    }
    case OpKind::reduce_scatter: {
      const auto& a = op.as<ops::ReduceScatter>();
      tensor_group(op).reduce_scatter_sum(m.data(a.inp), m.data(a.out), table[a.out].numel(),
                                          table[a.out].dtype);
      return;
    }
    case OpKind::pipe_exchange: {
      const auto& a = op.as<ops::PipeExchange>();
      if (!pipeline_) throw std::logic_error("executor: " + op.name + " without a pipeline group");
      const int id = a.send >= 0 ? a.send : a.recv;
      pipeline_->send_recv(a.send >= 0 ? m.data(a.send) : nullptr, a.send >= 0 ? table[a.send].numel() : 0,
                           a.recv >= 0 ? m.data(a.recv) : nullptr, a.recv >= 0 ? table[a.recv].numel() : 0,
                           table[id].dtype, pipeline_->rank() + (a.next ? 1 : -1));
      return;
    }
    default:
      throw std::logic_error("executor: op " + op.name + " is not a collective");
  }
}

void Executor::run_ops(int end, bool training, float grad_scale, uint64_t first_sample,
                       int64_t loss_targets) {
  check_groups();
  backend_.begin_pass(graph_);
  const OpRun run = op_run(training, grad_scale, first_sample, loss_targets);
  for (int i = 0; i < end; ++i) {
    memory_.begin_op(i);
    if (hooks_) hooks_->before(i, training);
    const Op& op = graph_.ops[i];
    if (is_collective(op.kind()))
      run_collective(op);
    else
      backend_.run(op, run);
    if (observer_) observer_(i);
    if (hooks_) hooks_->after(i, training);
    memory_.end_op(i);
  }
  if (hooks_) hooks_->end_pass();
}

void Executor::train_step(float grad_scale, uint64_t first_sample, int64_t step_targets) {
  run_ops(static_cast<int>(graph_.ops.size()), /*training=*/true, grad_scale, first_sample, step_targets);
}

void Executor::eval_step(int64_t targets) {
  run_ops(graph_.forward_end, /*training=*/false, 0.0f, 0, targets);
  memory_.reset_arenas();  // tensors kept for a backward that does not come
}

void Executor::clear_loss() {
  if (graph_.loss_sum >= 0) memory_.device().zero(memory_.data(graph_.loss_sum), sizeof(double));
}

double Executor::loss() const {
  double loss = 0;
  if (graph_.loss_sum >= 0) memory_.device().copy_to_host(&loss, memory_.data(graph_.loss_sum), sizeof loss);
  return loss;
}

void Executor::forward_logits(float* out) {
  if (graph_.pp > 1) throw std::logic_error("executor: whole logits of a pipeline stage");
  run_ops(graph_.loss_op, /*training=*/false, 0.0f, 0, {});
  const Op& head = graph_.ops[graph_.loss_op];
  memory_.begin_op(graph_.loss_op);  // binds the head's input (and ZeRO-3 weights) as the loss op would
  if (hooks_) hooks_->before(graph_.loss_op, /*training=*/false);
  backend_.logits(head, op_run(/*training=*/false, 0.0f, 0, {}), out);
  if (hooks_) hooks_->end_pass();
  memory_.reset_arenas();
}

}  // namespace mt
