#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cross_entropy.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

using testing::bitwise_equal;
using testing::expect_close;
using testing::random_floats;

constexpr int64_t kRows = 5, V = 1003, Vp = 1024;

struct Case {
  std::vector<float> logits;
  std::vector<int32_t> targets;
};

// Logits around `offset`, with huge values in the padded columns: they must never win.
Case make_case(float offset) {
  Case c{random_floats(kRows * Vp, 1, 3.0), {}};
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < Vp; ++j) c.logits[i * Vp + j] = j < V ? c.logits[i * Vp + j] + offset : 1e30f;
    c.targets.push_back(static_cast<int32_t>(random_below(9, 0, i, V)));
  }
  c.targets.back() = V - 1;  // the last real column is a target too
  return c;
}

// Per-row loss and gradient (softmax - onehot) * scale over the real columns, in double.
void cross_entropy_reference(const Case& c, float scale, std::vector<double>& losses,
                             std::vector<double>& grad) {
  losses.assign(kRows, 0);
  grad.assign(kRows * Vp, 0);
  for (int64_t i = 0; i < kRows; ++i) {
    const float* row = c.logits.data() + i * Vp;
    double max = row[0], sum = 0;
    for (int64_t j = 0; j < V; ++j) max = std::max(max, double(row[j]));
    for (int64_t j = 0; j < V; ++j) sum += std::exp(row[j] - max);
    losses[i] = std::log(sum) + max - row[c.targets[i]];
    for (int64_t j = 0; j < V; ++j) grad[i * Vp + j] = scale * (std::exp(row[j] - max) / sum);
    grad[i * Vp + c.targets[i]] -= scale;
  }
}

TEST(KernelCrossEntropy, LossAndGradientIgnorePadding) {
  for (float offset : {0.0f, 1000.0f, -1000.0f}) {  // a naive exp would overflow or underflow
    SCOPED_TRACE(offset);
    Case c = make_case(offset);
    std::vector<double> loss_ref, grad_ref;
    cross_entropy_reference(c, 0.2f, loss_ref, grad_ref);
    std::vector<float> losses(kRows);
    softmax_cross_entropy(c.logits.data(), losses.data(), c.targets.data(), nullptr, kRows, V, Vp, true,
                          0.2f);
    // Relative to the logits' scale: a logit of 1000 in float carries only 6e-5 absolute precision.
    expect_close(losses, loss_ref, 1e-5, 1e-5 * (1 + std::abs(offset)));
    expect_close(c.logits, grad_ref, 1e-5, 1e-7);
    for (int64_t i = 0; i < kRows; ++i) {
      for (int64_t j = V; j < Vp; ++j) ASSERT_EQ(c.logits[i * Vp + j], 0.0f);
    }
  }
}

TEST(KernelCrossEntropy, WithoutGradientLogitsStayUntouched) {
  Case c = make_case(0.0f);
  const std::vector<float> before = c.logits;
  std::vector<double> loss_ref, grad_ref;
  cross_entropy_reference(c, 1.0f, loss_ref, grad_ref);
  std::vector<float> losses(kRows);
  softmax_cross_entropy(c.logits.data(), losses.data(), c.targets.data(), nullptr, kRows, V, Vp, false, 1.0f);
  expect_close(losses, loss_ref, 1e-5, 1e-5);
  EXPECT_TRUE(bitwise_equal(c.logits, before));
}

TEST(KernelCrossEntropy, GradientMatchesFiniteDifferencesOfLoss) {
  Case c = make_case(0.0f);
  std::vector<double> loss_ref, grad_ref;
  cross_entropy_reference(c, 1.0f, loss_ref, grad_ref);
  // d loss_i / d logit_ij by central differences of the double loss, for a spread of columns.
  for (int64_t j : {0L, 17L, 500L, V - 1}) {
    for (int64_t i = 0; i < kRows; ++i) {
      Case up = c, down = c;
      const float h = 1e-2f;
      up.logits[i * Vp + j] += h;
      down.logits[i * Vp + j] -= h;
      std::vector<double> loss_up, loss_down, unused;
      cross_entropy_reference(up, 1.0f, loss_up, unused);
      cross_entropy_reference(down, 1.0f, loss_down, unused);
      const double fd = (loss_up[i] - loss_down[i]) / (up.logits[i * Vp + j] - down.logits[i * Vp + j]);
      EXPECT_NEAR(grad_ref[i * Vp + j], fd, 1e-5);
    }
  }
  std::vector<float> losses(kRows);
  softmax_cross_entropy(c.logits.data(), losses.data(), c.targets.data(), nullptr, kRows, V, Vp, true, 1.0f);
  expect_close(c.logits, grad_ref, 1e-5, 1e-7);
}

// A masked row's loss is 0 and its gradient zero; the counted rows are bitwise those of an unmasked call.
TEST(KernelCrossEntropy, MaskedRowsHaveNoLossAndNoGradient) {
  const std::vector<uint8_t> mask = {1, 0, 1, 0, 0};
  Case masked = make_case(0.0f), full = masked;
  std::vector<float> masked_losses(kRows), full_losses(kRows);
  softmax_cross_entropy(masked.logits.data(), masked_losses.data(), masked.targets.data(), mask.data(), kRows,
                        V, Vp, true, 0.5f);
  softmax_cross_entropy(full.logits.data(), full_losses.data(), full.targets.data(), nullptr, kRows, V, Vp,
                        true, 0.5f);
  for (int64_t i = 0; i < kRows; ++i) {
    SCOPED_TRACE(i);
    const auto row = [&](const Case& c) {
      return std::vector<float>(c.logits.begin() + i * Vp, c.logits.begin() + (i + 1) * Vp);
    };
    if (mask[i]) {
      EXPECT_EQ(masked_losses[i], full_losses[i]);
      EXPECT_TRUE(bitwise_equal(row(masked), row(full)));
    } else {
      EXPECT_EQ(masked_losses[i], 0.0f);
      EXPECT_EQ(row(masked), std::vector<float>(Vp, 0.0f));
    }
  }
}

}  // namespace
}  // namespace mt::kernels
