#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>

#include "optim/loss_scaler.h"

namespace mt {
namespace {

LossScalerConfig config(float initial, int64_t window, int hysteresis, float min_scale = 1.0f) {
  LossScalerConfig c;
  c.initial_scale = initial;
  c.window = window;
  c.hysteresis = hysteresis;
  c.min_scale = min_scale;
  return c;
}

TEST(LossScaler, DefaultsAreMegatrons) {
  const LossScaler scaler{LossScalerConfig{}};
  EXPECT_EQ(scaler.scale(), 65536.0f);
  EXPECT_EQ(scaler.state().good_steps, 0);
  EXPECT_EQ(scaler.state().hysteresis_left, 2);
}

TEST(LossScaler, DoublesExactlyEveryWindowOfCleanSteps) {
  LossScaler scaler(config(8.0f, 5, 2));
  float expected = 8.0f;
  for (int step = 1; step <= 23; ++step) {
    EXPECT_FALSE(scaler.update(false));
    if (step % 5 == 0) expected *= 2;
    ASSERT_EQ(scaler.scale(), expected) << "after step " << step;
  }
  EXPECT_EQ(scaler.state().good_steps, 3);
}

TEST(LossScaler, OverflowSkipsAndBacksOffAfterHysteresis) {
  LossScaler scaler(config(1024.0f, 100, 3));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 1024.0f);  // two of three tolerated overflows spent
  EXPECT_EQ(scaler.state().hysteresis_left, 1);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 512.0f);
  // Spent hysteresis is not refilled by clean steps short of a doubling: the next overflow halves again.
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(scaler.update(false));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 256.0f);
}

TEST(LossScaler, OverflowRestartsTheWindow) {
  LossScaler scaler(config(16.0f, 4, 5));
  for (int i = 0; i < 3; ++i) scaler.update(false);
  scaler.update(true);
  EXPECT_EQ(scaler.state().good_steps, 0);
  for (int i = 0; i < 3; ++i) scaler.update(false);
  EXPECT_EQ(scaler.scale(), 16.0f);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 32.0f);
}

TEST(LossScaler, DoublingRefillsHysteresis) {
  LossScaler scaler(config(16.0f, 2, 2));
  scaler.update(true);
  EXPECT_EQ(scaler.state().hysteresis_left, 1);
  scaler.update(false);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 32.0f);
  EXPECT_EQ(scaler.state().hysteresis_left, 2);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 32.0f);  // tolerated again
}

TEST(LossScaler, NeverBelowMinimum) {
  LossScaler scaler(config(8.0f, 10, 1, 2.0f));
  for (float expected : {4.0f, 2.0f, 2.0f, 2.0f}) {
    EXPECT_TRUE(scaler.update(true));
    EXPECT_EQ(scaler.scale(), expected);
  }
}

TEST(LossScaler, StaticScaleNeverChangesButSkipsOverflow) {
  LossScalerConfig c = config(128.0f, 2, 1);
  c.dynamic = false;
  LossScaler scaler(c);
  for (int i = 0; i < 10; ++i) {
    EXPECT_FALSE(scaler.update(false));
    EXPECT_TRUE(scaler.update(true));
  }
  EXPECT_EQ(scaler.scale(), 128.0f);
}

TEST(LossScaler, RestoredStateContinuesIdentically) {
  const LossScalerConfig c = config(4096.0f, 4, 3, 0.5f);
  LossScaler original(c);
  for (bool overflow : {true, false, false}) original.update(overflow);
  ASSERT_EQ(original.state().good_steps, 2);  // mid-window
  ASSERT_EQ(original.state().hysteresis_left, 2);
  LossScaler restored(c);
  restored.restore(original.state());
  const auto overflow_at = [](int step) { return step % 7 == 3 || step % 11 == 0; };
  for (int step = 0; step < 100; ++step) {
    ASSERT_EQ(original.update(overflow_at(step)), restored.update(overflow_at(step)));
    ASSERT_EQ(original.scale(), restored.scale()) << "at step " << step;
    ASSERT_EQ(original.state().good_steps, restored.state().good_steps);
    ASSERT_EQ(original.state().hysteresis_left, restored.state().hysteresis_left);
  }
}

TEST(LossScaler, RestoredPastASmallerWindowDoublesAtOnce) {
  LossScaler scaler(config(8.0f, 4, 2));
  scaler.restore({8.0f, 10, 2});  // saved by a run with a longer window
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 16.0f);
  EXPECT_EQ(scaler.state().good_steps, 0);
}

TEST(LossScaler, RejectsInvalidConfigAndState) {
  EXPECT_THROW(LossScaler(config(0.0f, 1, 1)), std::invalid_argument);
  EXPECT_THROW(LossScaler(config(-1.0f, 1, 1)), std::invalid_argument);
  EXPECT_THROW(LossScaler(config(std::numeric_limits<float>::infinity(), 1, 1)), std::invalid_argument);
  EXPECT_THROW(LossScaler(config(8.0f, 0, 1)), std::invalid_argument);
  EXPECT_THROW(LossScaler(config(8.0f, 1, 0)), std::invalid_argument);
  EXPECT_THROW(LossScaler(config(8.0f, 1, 1, 0.0f)), std::invalid_argument);
  EXPECT_THROW(LossScaler(config(8.0f, 1, 1, 16.0f)), std::invalid_argument);
  LossScalerConfig static_below_floor = config(0.5f, 1, 1);
  static_below_floor.dynamic = false;
  EXPECT_NO_THROW(LossScaler{static_below_floor});

  LossScaler scaler{LossScalerConfig{}};
  EXPECT_THROW(scaler.restore({0.0f, 0, 1}), std::invalid_argument);
  EXPECT_THROW(scaler.restore({8.0f, -1, 1}), std::invalid_argument);
  EXPECT_THROW(scaler.restore({8.0f, 0, -1}), std::invalid_argument);
}

}  // namespace
}  // namespace mt
