#include "optim/loss_scaler.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace mt {

namespace {

bool positive_finite(float x) {
  return x > 0 && std::isfinite(x);
}

}  // namespace

LossScaler::LossScaler(const LossScalerConfig& config)
    : config_(config), state_{config.initial_scale, 0, config.hysteresis} {
  if (!positive_finite(config.initial_scale)) throw std::invalid_argument("loss scale must be positive");
  if (config.window <= 0) throw std::invalid_argument("loss scale window must be positive");
  if (config.hysteresis <= 0) throw std::invalid_argument("loss scale hysteresis must be positive");
  if (!positive_finite(config.min_scale)) throw std::invalid_argument("minimum loss scale must be positive");
  // A static scale never backs off, so the floor does not constrain it.
  if (config.dynamic && config.min_scale > config.initial_scale) {
    throw std::invalid_argument("minimum loss scale exceeds the initial loss scale");
  }
}

bool LossScaler::update(bool overflow) {
  if (!config_.dynamic) return overflow;
  if (overflow) {
    state_.good_steps = 0;
    // Held at 0 once spent: every further overflow halves until a doubling restores the allowance.
    state_.hysteresis_left = std::max(state_.hysteresis_left - 1, 0);
    if (state_.hysteresis_left == 0) state_.scale = std::max(state_.scale * 0.5f, config_.min_scale);
    return true;
  }
  // >= rather than ==: a checkpoint restored under a smaller window may already be past it.
  if (++state_.good_steps >= config_.window) {
    state_.scale *= 2.0f;
    state_.good_steps = 0;
    state_.hysteresis_left = config_.hysteresis;
  }
  return false;
}

void LossScaler::restore(const State& state) {
  if (!positive_finite(state.scale)) throw std::invalid_argument("restored loss scale must be positive");
  if (state.good_steps < 0 || state.hysteresis_left < 0) {
    throw std::invalid_argument("restored loss scaler counts must not be negative");
  }
  state_ = state;
}

}  // namespace mt
