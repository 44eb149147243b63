// AdamW over 8-bit block-quantized moments: each block dequantized, stepped and requantized in one pass.
#include "backend/cpu/adamw_8bit.h"

#include <algorithm>
#include <stdexcept>

#include "backend/cpu/adamw_math.h"
#include "backend/cpu/block_codec.h"
#include "backend/cpu/isa_variant.h"

namespace mt::kernels {

namespace MT_ISA {

namespace {

// What every block of a call reads and writes besides its moments.
template <typename P, typename G>
struct StepInputs {
  float* master;
  P* param;
  const G* grad;
  uint64_t seed, index;  // index: the range's element 0 in the whole parameter buffer
};

// Elements [begin, end) of the range, whose moments are in the block buffers m, v from element `first` on.
template <Weights kWeights, typename P, typename G>
void update_elements(const StepInputs<P, G>& in, float* m, float* v, int64_t first, int64_t begin,
                     int64_t end, const Coefficients c) {  // a copy: no store in the loop can alias it
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const ElementStep e = adamw_element(load_weight<kWeights>(in.master, in.param, i), to_f32(in.grad[i]),
                                        m[i - first], v[i - first], c);
    m[i - first] = e.m;
    v[i - first] = e.v;
    store_weight<kWeights>(in.master, in.param, i, e.weight, in.seed, in.index + static_cast<uint64_t>(i));
  }
}

// Block b: elements [first, first + length) of the range.
template <Weights kWeights, typename P, typename G>
void update_block(const StepInputs<P, G>& in, const QuantizedMoments& q, int64_t b, int64_t first,
                  int64_t length, std::span<const DecayRun> runs, const RunCoefficients& coefficients) {
  alignas(64) float m[kInt8MomentBlock], v[kInt8MomentBlock];
  const MomentCodec m_codec = first_moment_codec(q.format), v_codec = second_moment_codec(q.format);
  dequantize_block(m_codec, q.m + first, q.m_scales[b], length, m);
  dequantize_block(v_codec, q.v + first, q.v_scales[b], length, v);
  // The last run starting at or before `first`, then each run overlapping the block.
  auto run = std::upper_bound(runs.begin(), runs.end(), first,
                              [](int64_t at, const DecayRun& r) { return at < r.begin; }) -
             1;
  const int64_t block_end = first + length;
  for (int64_t begin = first; begin < block_end; ++run) {
    const int64_t end = run + 1 == runs.end() ? block_end : std::min(block_end, (run + 1)->begin);
    update_elements<kWeights>(in, m, v, first, begin, end,
                              run->decay ? coefficients.decayed : coefficients.undecayed);
    begin = end;
  }
  q.m_scales[b] = quantize_block(m_codec, m, length, q.m + first);
  q.v_scales[b] = quantize_block(v_codec, v, length, q.v + first);
}

void check_runs(std::span<const DecayRun> runs) {
  if (runs.empty() || runs.front().begin != 0)
    throw std::invalid_argument("adamw_update_8bit: the decay runs must start at element 0");
  for (size_t r = 1; r < runs.size(); ++r)
    if (runs[r].begin <= runs[r - 1].begin)
      throw std::invalid_argument("adamw_update_8bit: the decay runs must start in increasing order");
}

}  // namespace

template <typename P, typename G>
void adamw_update_8bit(float* master, P* param, const G* grad, const QuantizedMoments& moments, int64_t n,
                       const AdamWStep& s, std::span<const DecayRun> runs, const AdamWRounding& rounding) {
  check_runs(runs);
  const RunCoefficients coefficients(s);
  const StepInputs<P, G> in{master, param, grad, rounding.seed, static_cast<uint64_t>(rounding.index)};
  const int64_t block = moment_block_size(moments.format);
  const int64_t blocks = (n + block - 1) / block;
  with_weights<P>(master, [&](auto weights) {
#pragma omp parallel for
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t first = b * block;
      update_block<decltype(weights)::value>(in, moments, b, first, std::min(block, n - first), runs,
                                             coefficients);
    }
  });
}

}  // namespace MT_ISA

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
template <typename P, typename G>
void adamw_update_8bit(float* master, P* param, const G* grad, const QuantizedMoments& moments, int64_t n,
                       const AdamWStep& s, std::span<const DecayRun> runs, const AdamWRounding& rounding) {
  dispatch<&adamw_update_8bit<P, G>>(master, param, grad, moments, n, s, runs, rounding);
}

#define MT_INSTANTIATE_ADAMW_8BIT(P, G)                                                         \
  template void adamw_update_8bit<P, G>(float*, P*, const G*, const QuantizedMoments&, int64_t, \
                                        const AdamWStep&, std::span<const DecayRun>, const AdamWRounding&);
// Every weight type with fp32 or bf16 gradients.
#define MT_INSTANTIATE_ADAMW_8BIT_GRADS(P) \
  MT_INSTANTIATE_ADAMW_8BIT(P, float) MT_INSTANTIATE_ADAMW_8BIT(P, bf16)
MT_INSTANTIATE_ADAMW_8BIT_GRADS(float)
MT_INSTANTIATE_ADAMW_8BIT_GRADS(bf16)
MT_INSTANTIATE_ADAMW_8BIT_GRADS(f16)
#undef MT_INSTANTIATE_ADAMW_8BIT_GRADS
#undef MT_INSTANTIATE_ADAMW_8BIT
#endif

namespace MT_ISA {
namespace {
template <typename P>
bool enroll_weights() {
  return enroll<&kernels::adamw_update_8bit<P, float>>(adamw_update_8bit) &&
         enroll<&kernels::adamw_update_8bit<P, bf16>>(adamw_update_8bit);
}
const bool enrolled = enroll_weights<float>() && enroll_weights<bf16>() && enroll_weights<f16>();
}  // namespace
}  // namespace MT_ISA

}  // namespace mt::kernels
