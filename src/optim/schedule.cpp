#include "optim/schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace mt {

DecayStyle parse_decay_style(const std::string& name) {
  return kDecayStyleNames.parse_or_fail("--lr-decay-style", name);
}

float LrSchedule::at(int64_t step) const {
  if (warmup_iters > 0 && step <= warmup_iters)
    return static_cast<float>(static_cast<double>(lr) * static_cast<double>(step) /
                              static_cast<double>(warmup_iters));
  if (style == DecayStyle::constant) return lr;
  const int64_t span = std::max<int64_t>(1, decay_iters - warmup_iters);
  const double progress =
      std::clamp(static_cast<double>(step - warmup_iters) / static_cast<double>(span), 0.0, 1.0);
  const double factor =
      style == DecayStyle::cosine ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
  return static_cast<float>(min_lr + (static_cast<double>(lr) - min_lr) * factor);
}

}  // namespace mt
