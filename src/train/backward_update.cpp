#include "train/backward_update.h"

#include <cmath>
#include <string>

#include "core/error.h"

namespace mt {

BackwardUpdate::BackwardUpdate(AdamW& optimizer, Allocation& memory, const std::vector<BlockGradients>& blocks,
                               int num_ops)
    : optimizer_(optimizer), memory_(memory), blocks_(blocks), starting_(num_ops, -1), ending_(num_ops, -1) {
  for (size_t b = 0; b < blocks.size(); ++b) {
    starting_.at(blocks[b].first_op) = static_cast<int>(b);
    ending_.at(blocks[b].last_op) = static_cast<int>(b);
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
  const int id = blocks_[starting_[op]].tensor;
  memory_.device().zero(memory_.data(id), memory_.table()[id].bytes());
}

void BackwardUpdate::after(int op, bool training) {
  if (!training || ending_[op] < 0) return;
  const BlockGradients& block = blocks_[ending_[op]];
  const TensorDesc& grads = memory_.table()[block.tensor];
  const void* data = memory_.data(block.tensor);
  // The ordinary step skips on a non-finite norm before any update; here the blocks after this one in the
  // backward are updated already, so the run stops, as it does without a loss scaler.
  const double squares = memory_.device().sum_of_squares(data, grads.dtype, grads.numel());
  if (!std::isfinite(squares))
    fail_data("training diverged: the gradients of block " + std::to_string(block.block) +
              " are not finite in the backward of step " + std::to_string(step_) +
              " (--optimizer-in-backward had updated the blocks after it; the last checkpoint holds finite "
              "states): try a lower --lr");
  sum_of_squares_ += squares;
  const int64_t begin = memory_.param_offset(block.first_param);
  optimizer_.update_range(memory_, lr_, begin, begin + grads.numel(), data);
}

}  // namespace mt
