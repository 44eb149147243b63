#include "train/backward_update.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"

namespace mt {

BackwardUpdate::BackwardUpdate(AdamW& optimizer, Allocation& memory, const BackwardUpdates& updates,
                               int num_ops)
    : optimizer_(optimizer), memory_(memory), updates_(updates), starting_(num_ops, -1), ending_(num_ops, -1) {
  for (size_t b = 0; b < updates.blocks.size(); ++b) {
    starting_.at(updates.blocks[b].first_op) = static_cast<int>(b);
    ending_.at(updates.blocks[b].last_op) = static_cast<int>(b);
  }
}

void BackwardUpdate::begin_step(int64_t step, float lr) {
  step_ = step;
  lr_ = lr;
  sum_of_squares_ = 0;
  optimizer_.begin_step();
}

OptimizerStepResult BackwardUpdate::end_step() const { return {std::sqrt(sum_of_squares_), false}; }

void BackwardUpdate::before(int op, bool training) {
  if (!training || starting_[op] < 0) return;
  const int id = updates_.blocks[starting_[op]].tensor;
  memory_.device().zero(memory_.data(id), memory_.table()[id].bytes());
}

void BackwardUpdate::after(int op, bool training) {
  if (!training || ending_[op] < 0) return;
  const BlockGradients& block = updates_.blocks[ending_[op]];
  const TensorDesc& grads = memory_.table()[block.tensor];
  const char* data = static_cast<const char*>(memory_.data(block.tensor));
  // The ordinary step skips on a non-finite norm before any update; here the blocks after this one in the
  // backward are updated already, so the run stops, as it does without a loss scaler.
  const double squares = memory_.device().sum_of_squares(data, grads.dtype, grads.numel());
  if (!std::isfinite(squares))
    fail_data("training diverged: the gradients of block " + std::to_string(block.block) +
              " are not finite in the backward of step " + std::to_string(step_) +
              " (--optimizer-in-backward had updated the blocks after it; the last checkpoint holds finite "
              "states): try a lower --lr");
  sum_of_squares_ += squares;
  const auto size = static_cast<int64_t>(dtype_size(grads.dtype));
  const auto at = [&](int64_t flat) { return data + (flat - block.flat_begin) * size; };
  for (int c : block.carries) {  // this block's part of each quantization block it shares
    const GradientCarry& carry = updates_.carries[c];
    const int64_t begin = std::max(block.flat_begin, carry.flat_begin),
                  end = std::min(block.flat_end, carry.flat_end);
    memory_.device().copy(static_cast<char*>(memory_.data(carry.tensor)) + (begin - carry.flat_begin) * size,
                          at(begin), (end - begin) * size);
  }
  update(block.whole_begin, block.whole_end, at(block.whole_begin));
  for (int c : block.carries)
    if (const GradientCarry& carry = updates_.carries[c]; carry.last_op == op)
      update(carry.flat_begin, carry.flat_end, memory_.data(carry.tensor));
}

void BackwardUpdate::update(int64_t begin, int64_t end, const void* grads) {
  if (begin < end) optimizer_.update_range(memory_, lr_, begin, end, grads);
}

}  // namespace mt
