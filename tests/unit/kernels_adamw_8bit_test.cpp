// AdamW with 8-bit moments: the same fp32 step as adamw_update on the dequantized moments, then requantized;
// decay runs across blocks, ranges cut on block boundaries, thread counts, and a few steps of training.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/adamw.h"
#include "backend/cpu/adamw_8bit.h"
#include "backend/cpu/block_quant.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

using testing::bitwise_equal;
using testing::random_floats;
using testing::to_float;
using testing::to_storage;
using testing::with_threads;

// One moment in its 8-bit blocks.
struct Moment {
  MomentCodec codec;
  std::vector<uint8_t> codes;
  std::vector<float> scales;
  Moment(MomentCodec c, const std::vector<float>& x)
      : codec(c), codes(x.size()), scales(moment_block_count(c, static_cast<int64_t>(x.size()))) {
    quantize_blocks(c, x.data(), static_cast<int64_t>(x.size()), codes.data(), scales.data());
  }
  std::vector<float> values() const {
    std::vector<float> x(codes.size());
    dequantize_blocks(codec, codes.data(), scales.data(), static_cast<int64_t>(x.size()), x.data());
    return x;
  }
  bool operator==(const Moment& o) const { return codes == o.codes && bitwise_equal(scales, o.scales); }
};

// A model-state range: weights (with or without a master), and both moments.
template <typename P>
struct State {
  std::vector<float> master;
  std::vector<P> param;
  Moment m, v;
  State(MomentFormat f, int64_t n, bool with_master)
      : master(with_master ? random_floats(n, 1) : std::vector<float>()),
        param(to_storage<P>(random_floats(n, 1))),
        m(first_moment_codec(f), random_floats(n, 2, 1e-3)),
        v(second_moment_codec(f), squares(random_floats(n, 3, 1e-3))) {}
  static std::vector<float> squares(std::vector<float> x) {
    for (float& f : x) f *= f;
    return x;
  }
  QuantizedMoments moments(MomentFormat f) {
    return {f, m.codes.data(), m.scales.data(), v.codes.data(), v.scales.data()};
  }
  float* master_data() { return master.empty() ? nullptr : master.data(); }
  bool operator==(const State& o) const {
    return bitwise_equal(master, o.master) && bitwise_equal(param, o.param) && m == o.m && v == o.v;
  }
};

constexpr MomentFormat kFormats[] = {MomentFormat::int8, MomentFormat::fp8};
std::string name(MomentFormat f) {
  return f == MomentFormat::int8 ? "int8" : "fp8";
}

// Runs that switch inside blocks of both sizes: decay, none from 3000 (int8 block 1, fp8 block 23), decay
// again from 3001, none from 5000.
const std::vector<DecayRun> kRuns = {{0, true}, {3000, false}, {3001, true}, {5000, false}};

AdamWStep step_at(int64_t t) {
  return {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, t == 2 ? 0.37f : 1.0f};
}

// The reference: adamw_update with fp32 moments over each run, on the dequantized moments, then quantized.
template <typename P, typename G>
void reference_step(State<P>& s, const std::vector<G>& grad, const AdamWStep& step, uint64_t seed) {
  const int64_t n = static_cast<int64_t>(grad.size());
  std::vector<float> m = s.m.values(), v = s.v.values();
  for (size_t r = 0; r < kRuns.size(); ++r) {
    const int64_t begin = kRuns[r].begin, end = r + 1 < kRuns.size() ? kRuns[r + 1].begin : n;
    AdamWStep run_step = step;
    run_step.weight_decay = kRuns[r].decay ? step.weight_decay : 0.0f;
    adamw_update<P, G, float>(s.master.empty() ? nullptr : s.master.data() + begin, s.param.data() + begin,
                              grad.data() + begin, m.data() + begin, v.data() + begin, end - begin, run_step,
                              {false, seed, begin});
  }
  s.m = Moment(s.m.codec, m);
  s.v = Moment(s.v.codec, v);
}

template <typename P, typename G>
void check_matches_fp32_kernel(bool with_master) {
  for (MomentFormat f : kFormats) {
    const int64_t n = 3 * kInt8MomentBlock + 500;  // a tail block in both formats
    State<P> actual(f, n, with_master), expected = actual;
    for (int64_t t = 1; t <= 3; ++t) {
      const std::vector<G> grad = to_storage<G>(random_floats(n, 10 + t, 1e-2));
      adamw_update_8bit<P, G>(actual.master_data(), actual.param.data(), grad.data(), actual.moments(f), n,
                              step_at(t), kRuns, {false, 40 + static_cast<uint64_t>(t), 0});
      reference_step(expected, grad, step_at(t), 40 + static_cast<uint64_t>(t));
      ASSERT_TRUE(actual == expected) << name(f) << " step " << t;
    }
  }
}

TEST(KernelAdamW8bit, SameStepAsTheFp32KernelOnTheDequantizedMoments) {
  check_matches_fp32_kernel<float, float>(false);
  check_matches_fp32_kernel<float, float>(true);
  check_matches_fp32_kernel<bf16, float>(true);
  check_matches_fp32_kernel<bf16, bf16>(true);
  check_matches_fp32_kernel<bf16, bf16>(false);  // stochastic weights, bits keyed by the flat index
  check_matches_fp32_kernel<f16, bf16>(true);
}

TEST(KernelAdamW8bit, RangesCutOnBlockBoundariesMatchOneCall) {
  // As ZeRO shards will be: [0, cut) and [cut, n), each with its own blocks, runs and rounding index.
  for (MomentFormat f : kFormats) {
    const int64_t n = 3 * kInt8MomentBlock + 500, cut = 2 * kInt8MomentBlock;  // a boundary in both formats
    const int64_t cut_block = cut / moment_block_size(f);
    State<bf16> whole(f, n, false), pieces = whole;
    const std::vector<bf16> grad = to_storage<bf16>(random_floats(n, 20, 1e-2));
    const AdamWRounding rounding{false, 5, 1000};
    adamw_update_8bit<bf16, bf16>(nullptr, whole.param.data(), grad.data(), whole.moments(f), n, step_at(1),
                                  kRuns, rounding);
    QuantizedMoments q = pieces.moments(f);
    adamw_update_8bit<bf16, bf16>(nullptr, pieces.param.data(), grad.data(), q, cut, step_at(1), kRuns,
                                  rounding);
    q.m += cut, q.v += cut, q.m_scales += cut_block, q.v_scales += cut_block;
    const std::vector<DecayRun> shifted = {{0, true}, {5000 - cut, false}};  // kRuns from `cut` on
    adamw_update_8bit<bf16, bf16>(nullptr, pieces.param.data() + cut, grad.data() + cut, q, n - cut,
                                  step_at(1), shifted, {false, 5, 1000 + cut});
    EXPECT_TRUE(whole == pieces) << name(f);
  }
}

TEST(KernelAdamW8bit, SameBitsForAnyThreadCount) {
  for (MomentFormat f : kFormats) {
    const int64_t n = 9 * kInt8MomentBlock + 1;
    std::vector<State<float>> results;
    for (int threads : {1, 2, 3}) {
      State<float> s(f, n, true);
      for (int64_t t = 1; t <= 2; ++t) {
        const std::vector<float> grad = random_floats(n, 30 + t, 1e-2);
        with_threads(threads, [&] {
          adamw_update_8bit<float, float>(s.master_data(), s.param.data(), grad.data(), s.moments(f), n,
                                          step_at(t), kRuns, {});
        });
      }
      results.push_back(std::move(s));
    }
    EXPECT_TRUE(results[0] == results[1]) << name(f);
    EXPECT_TRUE(results[0] == results[2]) << name(f);
  }
}

TEST(KernelAdamW8bit, RefusesBadRunsAndF16WithoutMaster) {
  State<float> s(MomentFormat::int8, 100, false);
  const std::vector<float> grad(100);
  const auto update = [&](std::vector<DecayRun> runs) {
    adamw_update_8bit<float, float>(nullptr, s.param.data(), grad.data(), s.moments(MomentFormat::int8), 100,
                                    step_at(1), runs, {});
  };
  EXPECT_THROW(update({}), std::invalid_argument);
  EXPECT_THROW(update({{1, true}}), std::invalid_argument);
  EXPECT_THROW(update({{0, true}, {5, false}, {5, true}}), std::invalid_argument);
  std::vector<f16> half(100);
  const std::vector<DecayRun> all = {{0, true}};
  EXPECT_THROW((adamw_update_8bit<f16, float>(nullptr, half.data(), grad.data(),
                                              s.moments(MomentFormat::int8), 100, step_at(1), all, {})),
               std::invalid_argument);
}

TEST(KernelAdamW8bit, TrainsLikeFp32Moments) {
  // Noisy gradients of 0.5 |w - target|^2: after 200 steps the 8-bit runs have come as close to the target
  // as the fp32 moments' run, up to 10% of the (noise-limited) distance left.
  const int64_t n = 2 * kInt8MomentBlock + 300;
  const std::vector<float> target = random_floats(n, 50);
  const auto distance = [&](const std::vector<float>& w) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += double(w[i] - target[i]) * (w[i] - target[i]);
    return std::sqrt(sum / n);
  };
  const std::vector<DecayRun> all = {{0, false}};
  std::vector<float> w32(n), m32(n), v32(n), grad(n);
  const double start = distance(w32);
  std::vector<double> finals;
  for (MomentFormat f : kFormats) {
    State<float> s(f, n, false);
    s.param.assign(n, 0.0f);
    s.m = Moment(s.m.codec, std::vector<float>(n));
    s.v = Moment(s.v.codec, std::vector<float>(n));
    for (int64_t t = 1; t <= 200; ++t) {
      const std::vector<float> noise = random_floats(n, 100 + t, 0.5);
      for (int64_t i = 0; i < n; ++i) grad[i] = s.param[i] - target[i] + noise[i];
      const AdamWStep step{2e-2f, 0.9f, 0.999f, 1e-8f, 0.0f, t};
      adamw_update_8bit<float, float>(nullptr, s.param.data(), grad.data(), s.moments(f), n, step, all, {});
      if (f == MomentFormat::int8) {  // the fp32 run, once, on the same noise
        for (int64_t i = 0; i < n; ++i) grad[i] = w32[i] - target[i] + noise[i];
        adamw_update<float, float, float>(nullptr, w32.data(), grad.data(), m32.data(), v32.data(), n, step,
                                          {});
      }
    }
    finals.push_back(distance(s.param));
  }
  const double fp32 = distance(w32);
  EXPECT_LT(fp32, 0.2 * start);
  EXPECT_NEAR(finals[0], fp32, 0.1 * fp32) << "int8";
  EXPECT_NEAR(finals[1], fp32, 0.1 * fp32) << "fp8";
}

}  // namespace
}  // namespace mt::kernels
