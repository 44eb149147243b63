#include "backend/cpu/adam_mini.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cpu/adamw_math.h"
#include "backend/cpu/block_codec.h"
#include "backend/cpu/isa_variant.h"
#include "core/int_math.h"

namespace mt::kernels {

namespace MT_ISA {

namespace {

// Each line's sum of (g * multiplier)^2 over elements [first, first + n) of the tensor (grad holds element
// `first` at 0), each line's elements in index order: the same bits for any thread count.
template <typename G>
std::vector<double> line_squares(const G* grad, const MiniBlockLayout& b, int64_t first, int64_t n,
                                 float multiplier) {
  const int64_t lines = b.by_column ? b.cols : b.rows;
  std::vector<double> line_sum(static_cast<size_t>(lines));
  const auto square = [&](int64_t i) {
    const float g = to_f32(grad[i - first]) * multiplier;
    return static_cast<double>(g * g);
  };
  const int64_t first_row = first / b.cols, end_row = ceil_div(first + n, b.cols);
  const auto row_part = [&](int64_t row) {  // the row's elements in the range, as tensor indices
    return std::pair{std::max(row * b.cols, first), std::min(row * b.cols + b.cols, first + n)};
  };
  if (b.by_column) {
    // A chunk of columns at a time, row by row: each column's sum in row order, read contiguously.
    constexpr int64_t kColumns = 64;
#pragma omp parallel for
    for (int64_t chunk = 0; chunk < b.cols; chunk += kColumns) {
      for (int64_t row = first_row; row < end_row; ++row) {
        const auto [begin, end] = row_part(row);
        const int64_t from = std::max(begin, row * b.cols + chunk),
                      to = std::min(end, row * b.cols + chunk + kColumns);
        for (int64_t i = from; i < to; ++i) line_sum[static_cast<size_t>(i - row * b.cols)] += square(i);
      }
    }
  } else {
#pragma omp parallel for
    for (int64_t row = first_row; row < end_row; ++row) {
      const auto [begin, end] = row_part(row);
      double sum = 0;
      for (int64_t i = begin; i < end; ++i) sum += square(i);
      line_sum[static_cast<size_t>(row)] = sum;
    }
  }
  return line_sum;
}

// sums[block] += each of its lines' sums, in line order.
void add_to_blocks(const std::vector<double>& line_sum, const MiniBlockLayout& b, double* sums) {
  for (size_t i = 0; i < line_sum.size(); ++i) sums[b.block_of[i]] += line_sum[i];
}

// v_b = beta2 v_b + (1 - beta2) mean, the mean the block's whole sum over its elements.
void step_second_moments(float* v, const double* sums, const MiniBlockLayout& b, const Coefficients& c) {
  const int64_t lines = b.by_column ? b.cols : b.rows, length = b.by_column ? b.rows : b.cols;
  std::vector<int64_t> lines_in(static_cast<size_t>(b.count));
  for (int64_t i = 0; i < lines; ++i) ++lines_in[static_cast<size_t>(b.block_of[i])];
  for (int64_t k = 0; k < b.count; ++k) {
    const float mean = static_cast<float>(sums[k] / static_cast<double>(lines_in[k] * length));
    v[k] = std::fma(v[k], c.v_keep, c.v_weight * mean);
  }
}

// The blocks' new second moments from the whole tensor's gradient.
template <typename G>
void update_second_moments(const G* grad, float* v, const MiniBlockLayout& b, const Coefficients& c) {
  std::vector<double> sums(static_cast<size_t>(b.count));
  add_to_blocks(line_squares(grad, b, 0, b.rows * b.cols, c.grad_multiplier), b, sums.data());
  step_second_moments(v, sums.data(), b, c);
}

// What a tensor's steps read and write besides its moments, element 0 first.
template <typename P, typename G>
struct TensorInputs {
  float* master;  // null without master weights
  P* param;
  const G* grad;
  uint64_t seed, index;  // index: element 0's in the whole parameter buffer
};

// Element i of the inputs, with first moment m in a block whose second moment is v_block: its weight
// stepped; returns the new first moment (before any rounding for storage).
template <Weights kWeights, typename P, typename G>
inline float step_element(const TensorInputs<P, G>& in, int64_t i, float m, float v_block,
                          const Coefficients& c) {
  const ElementStep e = adam_element(load_weight<kWeights>(in.master, in.param, i),
                                     to_f32(in.grad[i]) * c.grad_multiplier, m, v_block, c);
  store_weight<kWeights>(in.master, in.param, i, e.weight, in.seed, in.index + static_cast<uint64_t>(i));
  return e.m;
}

// Elements [first, first + n) of the tensor, row by row, so that an element's line needs no division and its
// second moment is a contiguous read (one per row, or the columns' gathered once): the inner loop then
// vectorizes as AdamW's does. The inputs and m hold element `first` at 0.
template <Weights kWeights, typename P, typename G, typename M>
void update(const TensorInputs<P, G>& in, M* m, const float* v, const MiniBlockLayout& b, int64_t first,
            int64_t n, const Coefficients& c) {
  // Sized, then filled: a push_back instantiated here could be the copy every other caller links to
  // (tests/build/check_isa_leaks.py).
  std::vector<float> v_of_column(static_cast<size_t>(b.by_column ? b.cols : 0));
  for (size_t col = 0; col < v_of_column.size(); ++col) v_of_column[col] = v[b.block_of[col]];
  const int64_t first_row = first / b.cols, end_row = ceil_div(first + n, b.cols);
#pragma omp parallel for
  for (int64_t row = first_row; row < end_row; ++row) {
    // The row's elements in the range, counted from `first`; column col is element col - row_start.
    const int64_t row_start = row * b.cols - first;
    const int64_t begin = std::max<int64_t>(row_start, 0), end = std::min(row_start + b.cols, n);
    if (b.by_column) {
      for (int64_t i = begin; i < end; ++i)
        m[i] = round_to<M>(step_element<kWeights>(in, i, to_f32(m[i]), v_of_column[i - row_start], c));
    } else {
      const float v_row = v[b.block_of[row]];
      for (int64_t i = begin; i < end; ++i)
        m[i] = round_to<M>(step_element<kWeights>(in, i, to_f32(m[i]), v_row, c));
    }
  }
}

int64_t elements(const MiniTensor& t) {
  return t.blocks.rows * t.blocks.cols;
}

// Quantization block k, elements [first, first + length) of the range: dequantized, its tensors' elements
// stepped in order, requantized.
template <Weights kWeights, typename P, typename G>
void update_quantized_block(const TensorInputs<P, G>& in, MomentCodec codec, uint8_t* m, float* m_scales,
                            int64_t k, int64_t first, int64_t length, std::span<const MiniTensor> tensors,
                            const RunCoefficients& coefficients) {
  alignas(64) float block[kInt8MomentBlock];
  dequantize_block(codec, m + first, m_scales[k], length, block);
  // The last tensor starting at or before `first`, then each one overlapping the block.
  auto t = std::upper_bound(tensors.begin(), tensors.end(), first,
                            [](int64_t at, const MiniTensor& x) { return at < x.begin; }) -
           1;
  for (int64_t at = first; at < first + length; ++t) {
    const int64_t end = std::min(first + length, t->begin + elements(*t));
    const Coefficients& c = t->decay ? coefficients.decayed : coefficients.undecayed;
    const MiniBlockLayout& b = t->blocks;
    // The tensor's row and column of element `at`, then counted on: one division per tensor and block.
    int64_t row = (at - t->begin) / b.cols, col = (at - t->begin) % b.cols;
    for (int64_t i = at; i < end; ++i) {
      const float v_block = t->v[b.block_of[b.by_column ? col : row]];
      block[i - first] = step_element<kWeights>(in, i, block[i - first], v_block, c);
      if (++col == b.cols) {
        col = 0;
        ++row;
      }
    }
    at = end;
  }
  m_scales[k] = quantize_block(codec, block, length, m + first);
}

// The tensors one after the other, from at or before [0, n)'s start to at or past its end.
void check_tensors(std::span<const MiniTensor> tensors, int64_t n) {
  int64_t end = tensors.empty() ? 0 : tensors.front().begin;
  for (const MiniTensor& t : tensors) {
    if (t.begin != end) throw std::invalid_argument("adam_mini_update_8bit: the tensors are not in order");
    end += elements(t);
  }
  if (tensors.empty() || tensors.front().begin > 0 || end < n)
    throw std::invalid_argument("adam_mini_update_8bit: the tensors must cover the range");
}

// std::invalid_argument naming `op` unless elements [first, first + n) lie in the tensor.
void check_range(const char* op, const MiniBlockLayout& b, int64_t first, int64_t n) {
  if (first < 0 || n < 0 || first + n > b.rows * b.cols)
    throw std::invalid_argument(std::string(op) + ": elements [" + std::to_string(first) + ", " +
                                std::to_string(first + n) + ") outside the tensor");
}

}  // namespace

template <typename G>
void adam_mini_second_moments(const G* grad, float* v, const MiniBlockLayout& blocks, const AdamWStep& s) {
  update_second_moments(grad, v, blocks, Coefficients(s));
}

template <typename G>
void adam_mini_block_squares(const G* grad, const MiniBlockLayout& blocks, int64_t first, int64_t n,
                             float grad_multiplier, double* sums) {
  check_range("adam_mini_block_squares", blocks, first, n);
  add_to_blocks(line_squares(grad, blocks, first, n, grad_multiplier), blocks, sums);
}

void adam_mini_second_moments_from_sums(float* v, const double* sums, const MiniBlockLayout& blocks,
                                        const AdamWStep& s) {
  step_second_moments(v, sums, blocks, Coefficients(s));
}

template <typename P, typename G, typename M>
void adam_mini_update(float* master, P* param, const G* grad, M* m, const float* v,
                      const MiniBlockLayout& blocks, int64_t first, int64_t n, const AdamWStep& s,
                      const AdamWRounding& rounding) {
  check_range("adam_mini_update", blocks, first, n);
  const Coefficients c(s);
  const TensorInputs<P, G> in{master, param, grad, rounding.seed, static_cast<uint64_t>(rounding.index)};
  with_weights<P>(master,
                  [&](auto weights) { update<decltype(weights)::value>(in, m, v, blocks, first, n, c); });
}

template <typename P, typename G>
void adam_mini_update_8bit(float* master, P* param, const G* grad, MomentFormat format, uint8_t* m,
                           float* m_scales, int64_t n, std::span<const MiniTensor> tensors,
                           const AdamWStep& s, const AdamWRounding& rounding) {
  check_tensors(tensors, n);
  const RunCoefficients coefficients(s);
  const TensorInputs<P, G> in{master, param, grad, rounding.seed, static_cast<uint64_t>(rounding.index)};
  const MomentCodec codec = first_moment_codec(format);
  const int64_t block = moment_block_size(format), blocks = ceil_div(n, block);
  with_weights<P>(master, [&](auto weights) {
#pragma omp parallel for
    for (int64_t k = 0; k < blocks; ++k)
      update_quantized_block<decltype(weights)::value>(in, codec, m, m_scales, k, k * block,
                                                       std::min(block, n - k * block), tensors, coefficients);
  });
}

}  // namespace MT_ISA

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
template <typename G>
void adam_mini_second_moments(const G* grad, float* v, const MiniBlockLayout& blocks, const AdamWStep& s) {
  dispatch<&adam_mini_second_moments<G>>(grad, v, blocks, s);
}
template void adam_mini_second_moments<float>(const float*, float*, const MiniBlockLayout&, const AdamWStep&);
template void adam_mini_second_moments<bf16>(const bf16*, float*, const MiniBlockLayout&, const AdamWStep&);

template <typename G>
void adam_mini_block_squares(const G* grad, const MiniBlockLayout& blocks, int64_t first, int64_t n,
                             float grad_multiplier, double* sums) {
  dispatch<&adam_mini_block_squares<G>>(grad, blocks, first, n, grad_multiplier, sums);
}
template void adam_mini_block_squares<float>(const float*, const MiniBlockLayout&, int64_t, int64_t, float,
                                             double*);
template void adam_mini_block_squares<bf16>(const bf16*, const MiniBlockLayout&, int64_t, int64_t, float,
                                            double*);

void adam_mini_second_moments_from_sums(float* v, const double* sums, const MiniBlockLayout& blocks,
                                        const AdamWStep& s) {
  dispatch<&adam_mini_second_moments_from_sums>(v, sums, blocks, s);
}

template <typename P, typename G, typename M>
void adam_mini_update(float* master, P* param, const G* grad, M* m, const float* v,
                      const MiniBlockLayout& blocks, int64_t first, int64_t n, const AdamWStep& s,
                      const AdamWRounding& rounding) {
  dispatch<&adam_mini_update<P, G, M>>(master, param, grad, m, v, blocks, first, n, s, rounding);
}

#define MT_INSTANTIATE_ADAM_MINI(P, G, M)                                                                 \
  template void adam_mini_update<P, G, M>(float*, P*, const G*, M*, const float*, const MiniBlockLayout&, \
                                          int64_t, int64_t, const AdamWStep&, const AdamWRounding&);
#define MT_INSTANTIATE_ADAM_MINI_MOMENTS(P, G) \
  MT_INSTANTIATE_ADAM_MINI(P, G, float) MT_INSTANTIATE_ADAM_MINI(P, G, bf16)
#define MT_INSTANTIATE_ADAM_MINI_GRADS(P) \
  MT_INSTANTIATE_ADAM_MINI_MOMENTS(P, float) MT_INSTANTIATE_ADAM_MINI_MOMENTS(P, bf16)
MT_INSTANTIATE_ADAM_MINI_GRADS(float)
MT_INSTANTIATE_ADAM_MINI_GRADS(bf16)
MT_INSTANTIATE_ADAM_MINI_GRADS(f16)
#undef MT_INSTANTIATE_ADAM_MINI_GRADS
#undef MT_INSTANTIATE_ADAM_MINI_MOMENTS
#undef MT_INSTANTIATE_ADAM_MINI

template <typename P, typename G>
void adam_mini_update_8bit(float* master, P* param, const G* grad, MomentFormat format, uint8_t* m,
                           float* m_scales, int64_t n, std::span<const MiniTensor> tensors,
                           const AdamWStep& s, const AdamWRounding& rounding) {
  dispatch<&adam_mini_update_8bit<P, G>>(master, param, grad, format, m, m_scales, n, tensors, s, rounding);
}
#define MT_INSTANTIATE_ADAM_MINI_8BIT(P, G)                                                                \
  template void adam_mini_update_8bit<P, G>(float*, P*, const G*, MomentFormat, uint8_t*, float*, int64_t, \
                                            std::span<const MiniTensor>, const AdamWStep&,                 \
                                            const AdamWRounding&);
#define MT_INSTANTIATE_ADAM_MINI_8BIT_GRADS(P) \
  MT_INSTANTIATE_ADAM_MINI_8BIT(P, float) MT_INSTANTIATE_ADAM_MINI_8BIT(P, bf16)
MT_INSTANTIATE_ADAM_MINI_8BIT_GRADS(float)
MT_INSTANTIATE_ADAM_MINI_8BIT_GRADS(bf16)
MT_INSTANTIATE_ADAM_MINI_8BIT_GRADS(f16)
#undef MT_INSTANTIATE_ADAM_MINI_8BIT_GRADS
#undef MT_INSTANTIATE_ADAM_MINI_8BIT
#endif

namespace MT_ISA {
// Enrolled at start-up; the helpers are this file's own (other files have their namesakes).
namespace {
template <typename P>
bool enroll_weights() {
  return enroll<&kernels::adam_mini_update<P, float, float>>(adam_mini_update) &&
         enroll<&kernels::adam_mini_update<P, float, bf16>>(adam_mini_update) &&
         enroll<&kernels::adam_mini_update<P, bf16, float>>(adam_mini_update) &&
         enroll<&kernels::adam_mini_update<P, bf16, bf16>>(adam_mini_update) &&
         enroll<&kernels::adam_mini_update_8bit<P, float>>(adam_mini_update_8bit) &&
         enroll<&kernels::adam_mini_update_8bit<P, bf16>>(adam_mini_update_8bit);
}
const bool enrolled =
    enroll_weights<float>() && enroll_weights<bf16>() && enroll_weights<f16>() &&
    enroll<&kernels::adam_mini_second_moments<float>>(adam_mini_second_moments) &&
    enroll<&kernels::adam_mini_second_moments<bf16>>(adam_mini_second_moments) &&
    enroll<&kernels::adam_mini_block_squares<float>>(adam_mini_block_squares) &&
    enroll<&kernels::adam_mini_block_squares<bf16>>(adam_mini_block_squares) &&
    enroll<&kernels::adam_mini_second_moments_from_sums>(adam_mini_second_moments_from_sums);
}  // namespace
}  // namespace MT_ISA

}  // namespace mt::kernels
