// The 8-bit AdamW kernel: one thread block per quantization block. Each thread dequantizes and steps its
// elements (kept in registers), the block's absmax is an integer max of the magnitudes' bits (exact, in any
// order: NaN above infinity, as the CPU's block_absmax), and every code is the definition's: one fp32
// division, then round_to_e4m3 or the dynamic map's bucket lookup (nearest_code). So the bytes, scales and
// weights equal the CPU's.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <type_traits>

#include "backend/cpu/dynamic_map.h"
#include "backend/cuda/adamw_8bit.cuh"
#include "backend/cuda/cuda_check.h"
#include "core/adamw_step.h"
#include "core/fp8.h"
#include "core/half.h"
#include "core/moment_format.h"
#include "core/rng.h"

namespace mt::cuda {

// This build's copy of the shared arithmetic (its top says why it has no namespace of its own).
#include "core/adamw_element.h"

namespace {

constexpr int kThreads = 256;
constexpr int kPerThread = static_cast<int>(kInt8MomentBlock / kThreads);  // the largest block's share
static_assert(kFp8MomentBlock <= kInt8MomentBlock && kInt8MomentBlock % kThreads == 0);
constexpr int kMaxRuns = 64;  // decay runs per launch: a bit mask and their starts, by value

// The dynamic maps: 0 signed (first moments), 1 unsigned (second moments).
__device__ int32_t dynamic_buckets[2][2 * kernels::kBucketsPerSign];
__device__ float dynamic_values[2][256];

struct RunTable {
  int64_t begin[kMaxRuns];  // relative to the range; begin[0] <= every element of the launch
  uint64_t decay;           // bit r: run r decays
  int count;
};

__device__ int map_of(MomentCodec c) {
  return c == MomentCodec::dynamic_signed ? 0 : 1;
}

// kernels::nearest_code over the same table.
__device__ uint8_t nearest_code(int map, float x) {
  const uint32_t bits = __float_as_uint(x);
  const int magnitude = static_cast<int>((bits & 0x7fffffffu) >> (23 - kernels::kBucketMantissaBits)) -
                        static_cast<int>(kernels::kFirstBucketKey);
  const int entry = dynamic_buckets[map][min(max(magnitude, 0), kernels::kBucketsPerSign - 1) +
                                         (bits >> 31 ? kernels::kBucketsPerSign : 0)];
  const int low = static_cast<int>(bits & 0xffffu) ^ (-static_cast<int>(bits >> 31) & 0xffff);
  return static_cast<uint8_t>((entry >> 17) + (low >= (entry & 0x1ffff) ? 1 : 0));
}

__device__ float dequantize(MomentCodec c, uint8_t code, float scale) {
  if (c == MomentCodec::e4m3) return to_f32(fp8_e4m3{code}) * scale;
  return dynamic_values[map_of(c)][code] * scale;
}

// block_quant.h's definition, for a block of positive scale.
__device__ uint8_t quantize(MomentCodec c, float x, float scale) {
  const float v = x / scale;
  if (c == MomentCodec::e4m3) return round_to_e4m3(v).bits;
  const uint8_t code = nearest_code(map_of(c), v);
  return code == 0 && v > 0 && c == MomentCodec::dynamic_unsigned ? 1 : code;
}

// The block's largest magnitude bits, in every thread.
__device__ uint32_t block_max(uint32_t bits) {
  __shared__ uint32_t warp_max[kThreads / 32];
  bits = __reduce_max_sync(0xffffffffu, bits);
  if (threadIdx.x % 32 == 0) warp_max[threadIdx.x / 32] = bits;
  __syncthreads();
  uint32_t largest = 0;
  for (int w = 0; w < kThreads / 32; ++w) largest = max(largest, warp_max[w]);
  __syncthreads();  // the next call reuses warp_max
  return largest;
}

__device__ bool decays(const RunTable& runs, int64_t i) {
  int lo = 0, hi = runs.count - 1;  // the last run with begin <= i
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (runs.begin[mid] <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return (runs.decay >> lo) & 1u;
}

template <typename P, typename G>
struct StepInputs {
  float* master;
  P* param;
  const G* grad;
  uint64_t seed, index;  // index: the range's element 0 in the whole parameter buffer
};

// The new codes of one moment's block (values[k] at element threadIdx.x + k * kThreads), and its scale.
__device__ void requantize(MomentCodec c, const float* values, uint32_t bits_max, int64_t first,
                           int64_t length, uint8_t* codes, float* scale_out, uint8_t zero) {
  const float absmax = __uint_as_float(block_max(bits_max));
  const float scale = c == MomentCodec::e4m3 ? absmax / kE4m3Max : absmax;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t j = threadIdx.x + static_cast<int64_t>(k) * kThreads;
    if (j < length) codes[first + j] = scale > 0 ? quantize(c, values[k], scale) : zero;
  }
  if (threadIdx.x == 0) *scale_out = scale;
}

template <Weights kWeights, typename P, typename G>
__global__ void __launch_bounds__(kThreads)
    adamw_8bit_kernel(StepInputs<P, G> in, QuantizedMoments q, int64_t n, int64_t first_block, RunTable runs,
                      Coefficients decayed, Coefficients undecayed, uint8_t signed_zero) {
  const MomentCodec m_codec = first_moment_codec(q.format), v_codec = second_moment_codec(q.format);
  const int64_t block = moment_block_size(q.format), b = first_block + blockIdx.x;
  const int64_t first = b * block, length = min(block, n - first);
  const float m_scale = q.m_scales[b], v_scale = q.v_scales[b];
  float m[kPerThread], v[kPerThread];
  uint32_t m_max = 0, v_max = 0;
#pragma unroll
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t j = threadIdx.x + static_cast<int64_t>(k) * kThreads, i = first + j;
    if (j >= length) continue;
    const Coefficients& c = decays(runs, i) ? decayed : undecayed;
    const ElementStep e =
        adamw_element(load_weight<kWeights>(in.master, in.param, i), to_f32(in.grad[i]),
                      dequantize(m_codec, q.m[i], m_scale), dequantize(v_codec, q.v[i], v_scale), c);
    m[k] = e.m;
    v[k] = e.v;
    m_max = max(m_max, __float_as_uint(e.m) & 0x7fffffffu);
    v_max = max(v_max, __float_as_uint(e.v) & 0x7fffffffu);
    store_weight<kWeights>(in.master, in.param, i, e.weight, in.seed, in.index + static_cast<uint64_t>(i));
  }
  const uint8_t m_zero = m_codec == MomentCodec::dynamic_signed ? signed_zero : 0;
  requantize(m_codec, m, m_max, first, length, q.m, q.m_scales + b, m_zero);
  requantize(v_codec, v, v_max, first, length, q.v, q.v_scales + b, 0);
}

void check_runs(std::span<const DecayRun> runs) {
  if (runs.empty() || runs.front().begin != 0)
    throw std::invalid_argument("adamw_update_8bit: the decay runs must start at element 0");
  for (size_t r = 1; r < runs.size(); ++r)
    if (runs[r].begin <= runs[r - 1].begin)
      throw std::invalid_argument("adamw_update_8bit: the decay runs must start in increasing order");
}

// Launches over blocks [b, blocks), as many at a time as the blocks' runs fit in one RunTable.
template <Weights kWeights, typename P, typename G>
void launch_blocks(const StepInputs<P, G>& in, const QuantizedMoments& q, int64_t n,
                   std::span<const DecayRun> runs, const AdamWStep& s, cudaStream_t stream) {
  AdamWStep undecayed_step = s;
  undecayed_step.weight_decay = 0;
  const Coefficients decayed(s), undecayed(undecayed_step);
  const int64_t block = moment_block_size(q.format), blocks = (n + block - 1) / block;
  const uint8_t signed_zero = kernels::signed_dynamic_map().zero_code;
  for (int64_t b = 0; b < blocks;) {
    const int64_t first = b * block;
    // The last run starting at or before `first`, and the runs after it that fit.
    const size_t r0 =
        static_cast<size_t>(std::upper_bound(runs.begin(), runs.end(), first,
                                             [](int64_t at, const DecayRun& r) { return at < r.begin; }) -
                            runs.begin()) -
        1;
    const size_t r1 = std::min(runs.size(), r0 + kMaxRuns);
    const int64_t end = r1 == runs.size() ? blocks : runs[r1].begin / block;  // blocks wholly before run r1
    if (end <= b) throw std::logic_error("cuda backend: adamw_update_8bit: over 64 decay runs in one block");
    RunTable table{};
    table.count = static_cast<int>(r1 - r0);
    for (size_t r = r0; r < r1; ++r) {
      table.begin[r - r0] = runs[r].begin;
      if (runs[r].decay) table.decay |= uint64_t{1} << (r - r0);
    }
    adamw_8bit_kernel<kWeights><<<static_cast<unsigned>(end - b), kThreads, 0, stream>>>(
        in, q, n, b, table, decayed, undecayed, signed_zero);
    check_launch("adamw_update_8bit");
    b = end;
  }
}

}  // namespace

void upload_dynamic_maps() {
  const kernels::DynamicMap* maps[2] = {&kernels::signed_dynamic_map(), &kernels::unsigned_dynamic_map()};
  for (size_t map = 0; map < 2; ++map) {
    MT_CUDA_CHECK("upload_dynamic_maps",
                  cudaMemcpyToSymbol(dynamic_buckets, maps[map]->bucket.data(), sizeof(dynamic_buckets[0]),
                                     map * sizeof(dynamic_buckets[0])));
    MT_CUDA_CHECK("upload_dynamic_maps",
                  cudaMemcpyToSymbol(dynamic_values, maps[map]->value.data(), sizeof(dynamic_values[0]),
                                     map * sizeof(dynamic_values[0])));
  }
}

const float* signed_dynamic_map_values() {
  void* maps = nullptr;
  MT_CUDA_CHECK("signed_dynamic_map_values", cudaGetSymbolAddress(&maps, dynamic_values));
  return static_cast<const float*>(maps);  // map 0 is the signed one
}

template <typename P, typename G>
void adamw_update_8bit(float* master, P* param, const G* grad, const QuantizedMoments& moments, int64_t n,
                       const AdamWStep& s, std::span<const DecayRun> runs, const AdamWRounding& rounding,
                       cudaStream_t stream) {
  check_runs(runs);
  // As the CPU's with_weights: the master when there is one, else fp32 in place, else bf16 stochastic.
  if (master == nullptr && std::is_same_v<P, f16>)
    throw std::invalid_argument("adamw_update: f16 weights need an fp32 master copy");
  if (n <= 0) return;
  const StepInputs<P, G> in{master, param, grad, rounding.seed, static_cast<uint64_t>(rounding.index)};
  if (master) {
    launch_blocks<Weights::master>(in, moments, n, runs, s, stream);
  } else if constexpr (std::is_same_v<P, float>) {
    launch_blocks<Weights::in_place>(in, moments, n, runs, s, stream);
  } else if constexpr (std::is_same_v<P, bf16>) {
    launch_blocks<Weights::stochastic>(in, moments, n, runs, s, stream);
  }
}

#define MT_INSTANTIATE_ADAMW_8BIT(P, G)                                                                    \
  template void adamw_update_8bit<P, G>(float*, P*, const G*, const QuantizedMoments&, int64_t,            \
                                        const AdamWStep&, std::span<const DecayRun>, const AdamWRounding&, \
                                        cudaStream_t);
#define MT_INSTANTIATE_ADAMW_8BIT_GRADS(P) \
  MT_INSTANTIATE_ADAMW_8BIT(P, float) MT_INSTANTIATE_ADAMW_8BIT(P, bf16)
MT_INSTANTIATE_ADAMW_8BIT_GRADS(float)
MT_INSTANTIATE_ADAMW_8BIT_GRADS(bf16)
MT_INSTANTIATE_ADAMW_8BIT_GRADS(f16)
#undef MT_INSTANTIATE_ADAMW_8BIT_GRADS
#undef MT_INSTANTIATE_ADAMW_8BIT

}  // namespace mt::cuda
