#include "train/backward_update.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace mt {

BackwardUpdate::BackwardUpdate(AdamW& optimizer, Allocation& memory, const BackwardUpdates& updates,
                               int num_ops, Communicator* data_parallel, OpHooks* gathers)
    : optimizer_(optimizer),
      memory_(memory),
      updates_(updates),
      data_parallel_(data_parallel),
      gathers_(gathers),
      starting_(num_ops, -1),
      ending_(num_ops, -1) {
  for (size_t b = 0; b < updates.blocks.size(); ++b) {
    starting_.at(updates.blocks[b].first_op) = static_cast<int>(b);
    ending_.at(updates.blocks[b].last_op) = static_cast<int>(b);
  }
}

void BackwardUpdate::begin_norm_pass() {
  updating_ = false;
  sum_of_squares_ = 0;
}

void BackwardUpdate::begin_update_pass(int64_t step, float lr, float grad_multiplier) {
  updating_ = true;
  step_ = step;
  lr_ = lr;
  grad_multiplier_ = grad_multiplier;
  sum_of_squares_ = 0;
  optimizer_.begin_step();
}

double BackwardUpdate::norm() const {
  return std::sqrt(sum_of_squares_);
}

void BackwardUpdate::before(int op, bool training) {
  if (gathers_) gathers_->before(op, training);
  if (!training || starting_[op] < 0) return;
  const int id = updates_.blocks[starting_[op]].tensor;
  memory_.device().zero(memory_.data(id), memory_.table()[id].bytes());
}

void BackwardUpdate::after(int op, bool training) {
  update_after(op, training);
  if (gathers_) gathers_->after(op, training);
}

void BackwardUpdate::end_pass() {
  if (gathers_) gathers_->end_pass();
}

void BackwardUpdate::update_after(int op, bool training) {
  if (!training || ending_[op] < 0) return;
  const BlockGradients& block = updates_.blocks[ending_[op]];
  const TensorDesc& grads = memory_.table()[block.tensor];
  char* data = static_cast<char*>(memory_.data(block.tensor));
  const double squares = sum_over_ranks(block, data);
  sum_of_squares_ += squares;
  if (!updating_) return;
  // A norm pass has found the step finite before any update; without one, the blocks after this one in the
  // backward are updated already, so the run stops, as the ordinary step does without a loss scaler.
  if (!std::isfinite(squares))
    fail_data("training diverged: the gradients of block " + std::to_string(block.block) +
              " are not finite in the backward of step " + std::to_string(step_) +
              " (--optimizer-in-backward had updated the blocks after it; the last checkpoint holds finite "
              "states): try a lower --lr");
  optimizer_.update_second_moments(memory_, grad_multiplier_, block.flat_begin, block.flat_end, data);
  fill_carries(block, data);
  const auto size = static_cast<int64_t>(dtype_size(grads.dtype));
  update(block.whole_begin, block.whole_end, data + (block.whole_begin - block.flat_begin) * size);
  for (int c : block.carries)
    if (const GradientCarry& carry = updates_.carries[c]; carry.last_op == op)
      update(carry.flat_begin, carry.flat_end, static_cast<const char*>(memory_.data(carry.tensor)));
}

double BackwardUpdate::sum_over_ranks(const BlockGradients& block, char* grads) {
  const TensorDesc& t = memory_.table()[block.tensor];
  const Plan& plan = memory_.plan();
  const auto squares = [&](const char* data, int64_t n) {
    return memory_.device().sum_of_squares(data, t.dtype, n);
  };
  // Every rank sums in rank order, so each holds the same bits the ordinary step's reduction gives.
  if (!data_parallel_ || !plan.reduces_grads_to_owners()) {
    if (data_parallel_) data_parallel_->all_reduce_sum(grads, t.numel(), t.dtype);
    return squares(grads, t.numel());
  }
  const auto size = static_cast<int64_t>(dtype_size(t.dtype));
  double own = 0;
  for (int r = 0; r < plan.sharding.dp; ++r) {
    const int64_t begin = std::max(block.flat_begin, r * plan.shard_elems);
    const int64_t end = std::min({block.flat_end, (r + 1) * plan.shard_elems, plan.num_params});
    if (begin >= end) continue;
    char* part = grads + (begin - block.flat_begin) * size;
    data_parallel_->reduce_sum(part, part, end - begin, t.dtype, r);
    if (r == plan.sharding.dp_rank) own = squares(part, end - begin);
  }
  // The ranks' parts' squares, summed in rank order: the same block norm, and verdict on it, on every rank.
  data_parallel_->all_reduce_sum(&own, 1, DType::f64);
  return own;
}

void BackwardUpdate::fill_carries(const BlockGradients& block, const char* grads) {
  const auto size = static_cast<int64_t>(dtype_size(memory_.table()[block.tensor].dtype));
  for (int c : block.carries) {
    const GradientCarry& carry = updates_.carries[c];
    const int64_t begin = std::max(block.flat_begin, carry.flat_begin),
                  end = std::min(block.flat_end, carry.flat_end);
    memory_.device().copy(static_cast<char*>(memory_.data(carry.tensor)) + (begin - carry.flat_begin) * size,
                          grads + (begin - block.flat_begin) * size, (end - begin) * size);
  }
}

void BackwardUpdate::update(int64_t begin, int64_t end, const char* grads) {
  const Plan& plan = memory_.plan();
  const int64_t first = std::max(begin, plan.shard_begin), last = std::min(end, plan.shard_end);
  const auto size = static_cast<int64_t>(dtype_size(plan.policy.grads));
  if (first < last)
    optimizer_.update_range(memory_, lr_, grad_multiplier_, first, last, grads + (first - begin) * size);
}

}  // namespace mt
