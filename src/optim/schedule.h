// Learning-rate schedule: linear warmup, then cosine (or linear) decay to min_lr, or constant.
#pragma once

#include <cstdint>
#include <string>

#include "core/names.h"

namespace mt {

enum class DecayStyle { cosine, linear, constant };
inline constexpr auto kDecayStyleNames = names_in_order<DecayStyle>("cosine", "linear", "constant");

DecayStyle parse_decay_style(const std::string& name);  // usage error naming --lr-decay-style

struct LrSchedule {
  float lr = 0;
  float min_lr = 0;
  int64_t warmup_iters = 0;
  int64_t decay_iters = 0;  // the step at which decay reaches min_lr (the run's --train-iters)
  DecayStyle style = DecayStyle::cosine;

  // The rate for 1-based step `step`: lr*step/warmup during warmup, then the decay.
  float at(int64_t step) const;
};

}  // namespace mt
