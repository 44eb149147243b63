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

// A run's coefficients differ only in the weight decay.
struct RunCoefficients {
  Coefficients decayed, undecayed;
};
AdamWStep without_decay(AdamWStep s) {
  s.weight_decay = 0;
  return s;
}

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
  // Locals too: a store through m or v could otherwise be taken to change `in`'s pointers.
  float* const master = in.master;
  P* const param = in.param;
  const G* const grad = in.grad;
  const uint64_t seed = in.seed, index = in.index;
  float* const mb = m - first;
  float* const vb = v - first;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const ElementStep e =
        adamw_element(load_weight<kWeights>(master, param, i), to_f32(grad[i]), mb[i], vb[i], c);
    mb[i] = e.m;
    vb[i] = e.v;
    store_weight<kWeights>(master, param, i, e.weight, seed, index + static_cast<uint64_t>(i));
  }
}

// The elements one pass updates: a whole int8 block, or 16 fp8 blocks (one pass over many short blocks
// would spend more on the pass than on the blocks).
constexpr int64_t kChunk = kInt8MomentBlock;
static_assert(kChunk % kFp8MomentBlock == 0);

// Asks for elements [first, first + length) of every array, the next chunk's, while this one is computed.
template <typename P, typename G>
void prefetch_chunk(const StepInputs<P, G>& in, const QuantizedMoments& q, int64_t first, int64_t length) {
  const auto lines = [&](const void* p, int64_t bytes) {
    for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(static_cast<const char*>(p) + b, 1, 2);
  };
  if (in.master) lines(in.master + first, length * 4);
  lines(in.param + first, length * static_cast<int64_t>(sizeof(P)));
  lines(in.grad + first, length * static_cast<int64_t>(sizeof(G)));
  lines(q.m + first, length);
  lines(q.v + first, length);
}

// Elements [first, first + length) of the range, whole blocks (the last one possibly shorter): dequantized
// into fp32 buffers, stepped, requantized block by block.
template <Weights kWeights, typename P, typename G>
void update_chunk(const StepInputs<P, G>& in, const QuantizedMoments& q, int64_t first, int64_t length,
                  std::span<const DecayRun> runs, const RunCoefficients& coefficients, int64_t next_length) {
  alignas(64) float m[kChunk], v[kChunk];
  prefetch_chunk(in, q, first + length, next_length);
  const MomentCodec m_codec = first_moment_codec(q.format), v_codec = second_moment_codec(q.format);
  const int64_t block = moment_block_size(q.format);
  for (int64_t at = 0; at < length; at += block) {
    const int64_t b = (first + at) / block, size = std::min(block, length - at);
    dequantize_block(m_codec, q.m + first + at, q.m_scales[b], size, m + at);
    dequantize_block(v_codec, q.v + first + at, q.v_scales[b], size, v + at);
  }
  // The last run starting at or before `first`, then each run overlapping the chunk.
  auto run = std::upper_bound(runs.begin(), runs.end(), first,
                              [](int64_t at, const DecayRun& r) { return at < r.begin; }) -
             1;
  const int64_t chunk_end = first + length;
  for (int64_t begin = first; begin < chunk_end; ++run) {
    const int64_t end = run + 1 == runs.end() ? chunk_end : std::min(chunk_end, (run + 1)->begin);
    update_elements<kWeights>(in, m, v, first, begin, end,
                              run->decay ? coefficients.decayed : coefficients.undecayed);
    begin = end;
  }
  for (int64_t at = 0; at < length; at += block) {
    const int64_t b = (first + at) / block, size = std::min(block, length - at);
    q.m_scales[b] = quantize_block(m_codec, m + at, size, q.m + first + at);
    q.v_scales[b] = quantize_block(v_codec, v + at, size, q.v + first + at);
  }
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
  const RunCoefficients coefficients{Coefficients(s), Coefficients(without_decay(s))};
  const StepInputs<P, G> in{master, param, grad, rounding.seed, static_cast<uint64_t>(rounding.index)};
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  with_weights<P>(master, [&](auto weights) {
#pragma omp parallel for
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t first = c * kChunk, length = std::min(kChunk, n - first);
      update_chunk<decltype(weights)::value>(in, moments, first, length, runs, coefficients,
                                             std::clamp<int64_t>(n - first - length, 0, kChunk));
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
