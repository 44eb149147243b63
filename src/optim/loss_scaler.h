// Dynamic loss scaling for fp16 training, as Megatron's DynamicGradScaler: the loss is multiplied by the
// scale before backward so that small gradients survive fp16's range, and the optimizer divides it out
// (AdamWStep::grad_multiplier). A step whose gradients overflowed is skipped; repeated overflows halve the
// scale, and a long enough run of clean steps doubles it.
#pragma once

#include <cstdint>

namespace mt {

struct LossScalerConfig {
  float initial_scale = 65536.0f;  // 2^16
  int64_t window = 1000;           // clean steps before the scale doubles (--loss-scale-window)
  int hysteresis = 2;              // overflows tolerated before backing off (--hysteresis)
  float min_scale = 1.0f;          // floor (--min-loss-scale)
  bool dynamic = true;             // false: the static scale --loss-scale N, never changes
};

class LossScaler {
 public:
  // Throws std::invalid_argument for a non-positive value or a dynamic scale that starts below the floor.
  explicit LossScaler(const LossScalerConfig& config);

  float scale() const { return state_.scale; }

  // Records one optimizer step's outcome. Returns true when the step must be skipped (overflow: inf/NaN in a
  // gradient), also for a static scale.
  bool update(bool overflow);

  // The state a checkpoint must restore: scale, clean steps since the last change, hysteresis left.
  struct State {
    float scale;
    int64_t good_steps;
    int hysteresis_left;
  };
  State state() const { return state_; }
  // Throws std::invalid_argument for a scale that is not positive and finite or a negative count.
  void restore(const State& state);

 private:
  LossScalerConfig config_;
  State state_;
};

}  // namespace mt
