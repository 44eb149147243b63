// Adam-mini's kernels: the first moments and weights of a tensor cut anywhere into ranges (a ZeRO shard's
// edge) are the whole tensor's step; with an 8-bit first moment, the same step as adam_mini_update with an
// fp32 m on the dequantized m, then requantized as AdamW's m, over tensors that straddle the quantization
// blocks (rows, a vector, columns; decay switching), in one range or in two; thread counts; tensors that do
// not cover the range.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cpu/adam_mini.h"
#include "backend/cpu/block_quant.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

using testing::bitwise_equal;
using testing::random_floats;
using testing::to_storage;
using testing::with_threads;

// One tensor: [rows, cols], line i in block block_of[i] of `count`, with or without weight decay.
struct MiniShape {
  int64_t rows, cols;
  bool by_column;
  std::vector<int32_t> block_of;
  int64_t count;
  bool decay;
};

// 4000 elements per row (blocks of 8 rows), a vector of 37 without decay, 2100 per column (3 blocks): the
// tensors switch inside an int8 block (2048) and inside fp8 blocks (128), and the last block is short.
std::vector<MiniShape> shapes() {
  std::vector<MiniShape> s = {
      {40, 100, false, {}, 5, true}, {1, 37, false, {0}, 1, false}, {30, 70, true, {}, 3, true}};
  for (int32_t i = 0; i < 40; ++i) s[0].block_of.push_back(i / 8);
  for (int32_t i = 0; i < 70; ++i) s[2].block_of.push_back(i % 3);
  return s;
}

struct MiniState {
  MomentFormat format;
  std::vector<MiniShape> shapes = kernels::shapes();
  int64_t n = 0;
  std::vector<float> master;
  std::vector<bf16> param;
  std::vector<uint8_t> m;
  std::vector<float> m_scales;
  std::vector<std::vector<float>> v;

  MiniState(MomentFormat f, bool with_master) : format(f) {
    for (const MiniShape& s : shapes) {
      n += s.rows * s.cols;
      std::vector<float> vs = random_floats(s.count, 3 + v.size(), 1e-3);
      for (float& x : vs) x *= x;
      v.push_back(vs);
    }
    if (with_master) master = random_floats(n, 1);
    param = to_storage<bf16>(random_floats(n, 1));
    m.resize(static_cast<size_t>(n));
    m_scales.resize(static_cast<size_t>(moment_block_count(first_moment_codec(f), n)));
    quantize_blocks(first_moment_codec(f), random_floats(n, 2, 1e-3).data(), n, m.data(), m_scales.data());
  }
  float* master_at(int64_t i) { return master.empty() ? nullptr : master.data() + i; }
  std::vector<MiniTensor> tensors() {
    std::vector<MiniTensor> t;
    int64_t begin = 0;
    for (size_t k = 0; k < shapes.size(); ++k) {
      const MiniShape& s = shapes[k];
      t.push_back({begin, {s.rows, s.cols, s.by_column, s.block_of.data(), s.count}, v[k].data(), s.decay});
      begin += s.rows * s.cols;
    }
    return t;
  }
  bool operator==(const MiniState& o) const {
    return bitwise_equal(master, o.master) && bitwise_equal(param, o.param) && m == o.m &&
           bitwise_equal(m_scales, o.m_scales) && v.size() == o.v.size() && bitwise_equal(v[0], o.v[0]) &&
           bitwise_equal(v[1], o.v[1]) && bitwise_equal(v[2], o.v[2]);
  }
};

AdamWStep mini_step_at(int64_t t) {
  return {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, t == 2 ? 0.37f : 1.0f};
}

// Every tensor's second moments (the pass before any first moments).
void second_moments(MiniState& s, const std::vector<bf16>& grad, const AdamWStep& step) {
  for (const MiniTensor& t : s.tensors())
    adam_mini_second_moments(grad.data() + t.begin, t.v, t.blocks, step);
}

// The reference: adam_mini_update with an fp32 m per whole tensor on the dequantized m, then m quantized.
void mini_reference_step(MiniState& s, const std::vector<bf16>& grad, const AdamWStep& step,
                         const AdamWRounding& r) {
  const MomentCodec codec = first_moment_codec(s.format);
  std::vector<float> m(static_cast<size_t>(s.n));
  dequantize_blocks(codec, s.m.data(), s.m_scales.data(), s.n, m.data());
  second_moments(s, grad, step);
  for (const MiniTensor& t : s.tensors()) {
    AdamWStep tensor_step = step;
    if (!t.decay) tensor_step.weight_decay = 0;
    adam_mini_update<bf16, bf16, float>(s.master_at(t.begin), s.param.data() + t.begin, grad.data() + t.begin,
                                        m.data() + t.begin, t.v, t.blocks, 0, t.blocks.rows * t.blocks.cols,
                                        tensor_step, {false, r.seed, r.index + t.begin});
  }
  quantize_blocks(codec, m.data(), s.n, s.m.data(), s.m_scales.data());
}

void step_8bit(MiniState& s, const std::vector<bf16>& grad, const AdamWStep& step, const AdamWRounding& r) {
  second_moments(s, grad, step);
  adam_mini_update_8bit<bf16, bf16>(s.master_at(0), s.param.data(), grad.data(), s.format, s.m.data(),
                                    s.m_scales.data(), s.n, s.tensors(), step, r);
}

// The update in the backward's order: every tensor's second moments, then the first moments of the range
// from quantization block `split` on, then of the range before it, each with the tensors that cover it.
void step_in_parts(MiniState& s, const std::vector<bf16>& grad, const AdamWStep& step, const AdamWRounding& r,
                   int64_t split) {
  second_moments(s, grad, step);
  const int64_t at = split * moment_block_size(s.format);
  for (const auto& [begin, end] : {std::pair{at, s.n}, std::pair<int64_t, int64_t>{0, at}}) {
    std::vector<MiniTensor> covering;
    for (MiniTensor t : s.tensors())
      if (t.begin < end && t.begin + t.blocks.rows * t.blocks.cols > begin) {
        t.begin -= begin;
        covering.push_back(t);
      }
    adam_mini_update_8bit<bf16, bf16>(s.master_at(begin), s.param.data() + begin, grad.data() + begin,
                                      s.format, s.m.data() + begin, s.m_scales.data() + split * (begin > 0),
                                      end - begin, covering, step,
                                      {r.stochastic_moments, r.seed, r.index + begin});
  }
}

// One tensor with an fp32 m (or bf16 weights without master: bits keyed by the flat index), stepped whole or
// in the ranges cut at `cuts` (elements of the tensor, in order; not on a row's edge).
struct FloatState {
  MiniShape shape;
  std::vector<float> master, m, v;
  std::vector<bf16> param;

  FloatState(const MiniShape& s, bool with_master) : shape(s) {
    const int64_t n = s.rows * s.cols;
    if (with_master) master = random_floats(n, 4);
    param = to_storage<bf16>(random_floats(n, 5));
    m = random_floats(n, 6, 1e-3);
    v = random_floats(s.count, 7, 1e-3);
    for (float& x : v) x *= x;
  }
  void step(const std::vector<bf16>& grad, const AdamWStep& step, std::vector<int64_t> cuts) {
    const MiniBlockLayout b{shape.rows, shape.cols, shape.by_column, shape.block_of.data(), shape.count};
    adam_mini_second_moments(grad.data(), v.data(), b, step);
    cuts.insert(cuts.begin(), 0);
    cuts.push_back(shape.rows * shape.cols);
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const int64_t first = cuts[k];
      adam_mini_update<bf16, bf16, float>(
          master.empty() ? nullptr : master.data() + first, param.data() + first, grad.data() + first,
          m.data() + first, v.data(), b, first, cuts[k + 1] - first, step, {false, 90, 500 + first});
    }
  }
  bool operator==(const FloatState& o) const {
    return bitwise_equal(master, o.master) && bitwise_equal(param, o.param) && bitwise_equal(m, o.m) &&
           bitwise_equal(v, o.v);
  }
};

TEST(KernelAdamMini, RangesCutAnywhereAreTheWholeTensorsStep) {
  for (const MiniShape& shape : shapes())
    for (bool with_master : {true, false}) {
      const int64_t n = shape.rows * shape.cols;
      FloatState whole(shape, with_master), cut = whole;
      for (int64_t t = 1; t <= 3; ++t) {
        const std::vector<bf16> grad =
            to_storage<bf16>(random_floats(n, 80 + static_cast<uint64_t>(t), 1e-2));
        whole.step(grad, mini_step_at(t), {});
        cut.step(grad, mini_step_at(t), {n / 3 + 1, n / 3 + 2, n - 5});
        ASSERT_TRUE(cut == whole) << shape.rows << "x" << shape.cols << " master " << with_master << " step "
                                  << t;
      }
    }
}

TEST(KernelAdamMini, BlockSumsOfRangesGiveTheSecondMoments) {
  // One range: the whole tensor's sums, bit for bit the one-pass step. Ranges cut anywhere (a ZeRO-2 shard's
  // edge) sum a block in parts, added after: within rounding.
  for (const MiniShape& shape : shapes()) {
    const int64_t n = shape.rows * shape.cols;
    const MiniBlockLayout b{shape.rows, shape.cols, shape.by_column, shape.block_of.data(), shape.count};
    const std::vector<bf16> grad = to_storage<bf16>(random_floats(n, 11, 1e-2));
    const AdamWStep step = mini_step_at(2);
    std::vector<float> whole = random_floats(shape.count, 12, 1e-3);
    for (float& x : whole) x *= x;
    std::vector<float> one_range = whole, cut = whole;
    adam_mini_second_moments(grad.data(), whole.data(), b, step);
    std::vector<double> sums(static_cast<size_t>(shape.count)), parts(sums.size());
    adam_mini_block_squares(grad.data(), b, 0, n, step.grad_multiplier, sums.data());
    adam_mini_second_moments_from_sums(one_range.data(), sums.data(), b, step);
    EXPECT_TRUE(bitwise_equal(one_range, whole)) << shape.rows << "x" << shape.cols;
    for (const auto& [first, last] :
         {std::pair<int64_t, int64_t>{0, n / 3 + 1}, {n / 3 + 1, n - 5}, {n - 5, n}})
      adam_mini_block_squares(grad.data() + first, b, first, last - first, step.grad_multiplier,
                              parts.data());
    adam_mini_second_moments_from_sums(cut.data(), parts.data(), b, step);
    for (int64_t k = 0; k < shape.count; ++k) EXPECT_NEAR(cut[k], whole[k], 1e-6 * whole[k]) << k;
  }
}

TEST(KernelAdamMini, RefusesARangeOutsideTheTensor) {
  const MiniShape shape = shapes()[0];
  FloatState s(shape, true);
  const MiniBlockLayout b{shape.rows, shape.cols, shape.by_column, shape.block_of.data(), shape.count};
  const std::vector<bf16> grad = to_storage<bf16>(random_floats(shape.rows * shape.cols, 9, 1e-2));
  EXPECT_THROW(
      (adam_mini_update<bf16, bf16, float>(s.master.data(), s.param.data(), grad.data(), s.m.data(),
                                           s.v.data(), b, 100, shape.rows * shape.cols, mini_step_at(1), {})),
      std::invalid_argument);
  std::vector<double> sums(static_cast<size_t>(shape.count));
  EXPECT_THROW(adam_mini_block_squares(grad.data(), b, -1, 10, 1.0f, sums.data()), std::invalid_argument);
}

constexpr MomentFormat kMomentFormats[] = {MomentFormat::int8, MomentFormat::fp8};
std::string format_name(MomentFormat f) {
  return f == MomentFormat::int8 ? "int8" : "fp8";
}

TEST(KernelAdamMini8bit, SameStepAsTheFp32KernelOnTheDequantizedMoment) {
  for (MomentFormat f : kMomentFormats)
    for (bool with_master : {true, false}) {  // without: stochastic weights, bits keyed by the flat index
      MiniState actual(f, with_master), expected = actual;
      for (int64_t t = 1; t <= 3; ++t) {
        const std::vector<bf16> grad =
            to_storage<bf16>(random_floats(actual.n, 10 + static_cast<uint64_t>(t), 1e-2));
        const AdamWRounding rounding{false, 40 + static_cast<uint64_t>(t), 1000};
        step_8bit(actual, grad, mini_step_at(t), rounding);
        mini_reference_step(expected, grad, mini_step_at(t), rounding);
        ASSERT_TRUE(actual == expected) << format_name(f) << " master " << with_master << " step " << t;
      }
    }
}

TEST(KernelAdamMini8bit, SecondMomentsFirstThenRangesOfBlocksIsTheWholeStep) {
  for (MomentFormat f : kMomentFormats)
    for (bool with_master : {true, false}) {
      MiniState whole(f, with_master), parts = whole;
      // A boundary inside the first tensor (int8: 2048 of its 4000) or the third (fp8: 128 x 40 = 5120).
      const int64_t split = f == MomentFormat::int8 ? 1 : 40;
      for (int64_t t = 1; t <= 3; ++t) {
        const std::vector<bf16> grad =
            to_storage<bf16>(random_floats(whole.n, 60 + static_cast<uint64_t>(t), 1e-2));
        const AdamWRounding rounding{false, 70 + static_cast<uint64_t>(t), 1000};
        step_8bit(whole, grad, mini_step_at(t), rounding);
        step_in_parts(parts, grad, mini_step_at(t), rounding, split);
        ASSERT_TRUE(parts == whole) << format_name(f) << " master " << with_master << " step " << t;
      }
    }
}

TEST(KernelAdamMini8bit, SameBitsForAnyThreadCount) {
  for (MomentFormat f : kMomentFormats) {
    std::vector<MiniState> results;
    for (int threads : {1, 2, 3}) {
      MiniState s(f, true);
      for (int64_t t = 1; t <= 2; ++t) {
        const std::vector<bf16> grad =
            to_storage<bf16>(random_floats(s.n, 30 + static_cast<uint64_t>(t), 1e-2));
        with_threads(threads, [&] { step_8bit(s, grad, mini_step_at(t), {}); });
      }
      results.push_back(std::move(s));
    }
    EXPECT_TRUE(results[0] == results[1]) << format_name(f);
    EXPECT_TRUE(results[0] == results[2]) << format_name(f);
  }
}

TEST(KernelAdamMini8bit, RefusesTensorsThatDoNotCoverTheRange) {
  MiniState s(MomentFormat::int8, true);
  const std::vector<bf16> grad = to_storage<bf16>(random_floats(s.n, 50, 1e-2));
  std::vector<MiniTensor> gap = s.tensors();
  gap[1].begin += 1;  // a gap before the vector, which then runs past the third tensor's start
  std::vector<MiniTensor> short_of_n = s.tensors();
  short_of_n.pop_back();
  std::vector<MiniTensor> late = s.tensors();
  late.erase(late.begin());
  for (const std::vector<MiniTensor>* tensors : {&gap, &short_of_n, &late})
    EXPECT_THROW(
        (adam_mini_update_8bit<bf16, bf16>(s.master.data(), s.param.data(), grad.data(), s.format, s.m.data(),
                                           s.m_scales.data(), s.n, *tensors, mini_step_at(1), {})),
        std::invalid_argument);
}

}  // namespace
}  // namespace mt::kernels
