// Causal grouped-query attention kernels (attention.cuh), flash style in plain SIMT code: fp32 tiles in
// shared memory, fp32 accumulators in registers, an online softmax in the forward. Three kernels:
//   forward: one block per (query tile, head, batch); walks the key tiles its queries reach, keeping a
//            running max m, sum l and output accumulator per query row; writes out and lse = m + log(l).
//   dK, dV:  one block per (key tile, key/value head, batch); loops over the group's query heads and the
//            query tiles after the keys, in order, recomputing P = exp(scale * QK^T - lse) and
//            dS = scale * P * (dO V^T - D), D = rowsum(dO * O); dV += P^T dO, dK += dS^T Q.
//   dQ:      one block per (query tile, head, batch); walks the key tiles in order: dQ += dS K.
// Every sum runs in one fixed order inside one block, so two runs give the same bits; there are no
// atomics and no scratch (D is recomputed per query tile from dO and O).
//
// Thread layout: 4 warps. Where a warp owns rows (query rows in the forward and dQ, key rows in dK/dV),
// its lanes first take the other side's rows for the dot products (lane = key, or lane = query), then own
// head dimensions lane, lane + 32, ... of the accumulators, the probabilities travelling by shuffles.
// Tensor cores (mma.sync on sm_80, wgmma on sm_90) would replace the two dot-product loops and the two
// accumulation loops of each step later: they are the score tile QK^T (and dO V^T) and the rank-Bc updates.
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/cuda_check.h"
#include "core/half.h"

namespace mt::cuda {

namespace {

constexpr int kWarp = 32;
constexpr int kWarps = 4;
constexpr int kThreads = kWarp * kWarps;
constexpr unsigned kAllLanes = 0xffffffffu;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Tile shapes for a head-size bucket D (32, 64 or 128; the runtime head size is at most D and the rest of
// each tile row is zeros). Rows per warp shrink for D = 128 so that every kernel's tiles fit 48 KiB of
// static shared memory.
template <int D>
struct Tiles {
  static constexpr int kSlots = D / kWarp;  // head dimensions a lane owns: lane, lane + 32, ...
  static constexpr int kStride = D + 1;     // tile rows that lanes read down a column: no bank conflicts
  static constexpr int kForwardRows = (D <= 64 ? 8 : 4) * kWarps;  // queries of a forward block
  static constexpr int kDqRows = (D <= 64 ? 8 : 2) * kWarps;       // queries of a dQ block
  static constexpr int kDkvKeys = (D <= 64 ? 8 : 2) * kWarps;      // keys of a dK/dV block
};

// The problem, as every kernel takes it.
struct Shape {
  int T, NH, NKV, hs;
  int64_t C;    // row stride of out and dout
  int64_t row;  // row stride of qkv and dqkv: C + 2 * NKV * hs
  float scale;  // 1 / sqrt(hs)
  bool vec;     // rows load in 16-byte pieces: hs * sizeof(T) and the pointers are multiples of 16
};

// Butterfly reductions: every lane ends with the same bits (each step adds the same two values).
__device__ float warp_max(float x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(kAllLanes, x, offset));
  return x;
}
__device__ float warp_sum(float x) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(kAllLanes, x, offset);
  return x;
}

// acc[r] += sum over the tile's first nk rows c of weight[r] (lane c's) * tile row c, in c order: each lane
// holds its own dimensions (lane, lane + 32, ...) of every accumulated row.
template <int kRows, int kSlots>
__device__ void add_weighted_rows(float (&acc)[kRows][kSlots], const float (&weight)[kRows],
                                  const float* tile, int stride, int nk, int lane) {
  for (int c = 0; c < nk; ++c) {
    float wc[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) wc[r] = __shfl_sync(kAllLanes, weight[r], c);
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      const float value = tile[c * stride + lane + j * kWarp];
#pragma unroll
      for (int r = 0; r < kRows; ++r) acc[r][j] = fmaf(wc[r], value, acc[r][j]);
    }
  }
}

// The first key query t of the row starting at row_start attends to (first_key in cpu/attention.h),
// clamped to the row so that a bad position cannot reach another row's keys.
__device__ int first_key(const int32_t* positions, int64_t row_start, int t) {
  return positions ? max(0, t - positions[row_start + t]) : 0;
}

// Fills rows [0, kRows) of a shared fp32 tile (row stride lds) from rows [0, n) of src (stride ld), hs
// values a row; zeros past hs (up to D) and past n, so padding never turns into NaN in a product.
template <int D, int kRows, typename T>
__device__ void load_tile(float* tile, int lds, const T* __restrict__ src, int64_t ld, int n, int hs,
                          bool vec) {
  if (vec) {
    constexpr int kPer = 16 / sizeof(T), kPieces = D / kPer;
    for (int i = threadIdx.x; i < kRows * kPieces; i += kThreads) {
      const int r = i / kPieces, c = (i % kPieces) * kPer;
      alignas(16) T values[kPer];
      *reinterpret_cast<uint4*>(values) =
          r < n && c < hs ? *reinterpret_cast<const uint4*>(src + r * ld + c) : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int e = 0; e < kPer; ++e) tile[r * lds + c + e] = to_f32(values[e]);
    }
  } else {
    for (int i = threadIdx.x; i < kRows * D; i += kThreads) {
      const int r = i / D, c = i % D;
      tile[r * lds + c] = r < n && c < hs ? to_f32(src[r * ld + c]) : 0.0f;
    }
  }
}

// rowsum(dO * O) for rows r < n of a tile of kRows (dO from the shared tile, O from global rows ld
// apart), warp w taking rows w, w + 4, ...; zeros for rows past n.
template <int D, int kRows, typename T>
__device__ void row_dots(float* dots, const float* do_tile, const T* __restrict__ out_rows, int64_t ld, int n,
                         int hs) {
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int r = warp; r < kRows; r += kWarps) {
    float sum = 0;
    if (r < n) {
#pragma unroll
      for (int j = 0; j < Tiles<D>::kSlots; ++j) {
        const int d = lane + j * kWarp;
        if (d < hs) sum = fmaf(do_tile[r * Tiles<D>::kStride + d], to_f32(out_rows[r * ld + d]), sum);
      }
    }
    sum = warp_sum(sum);
    if (lane == 0) dots[r] = sum;
  }
}

// Writes a lane's accumulator slots (times `factor`) into a row of storage, dimensions below hs.
template <int D, typename T>
__device__ void store_row(T* __restrict__ dst, const float (&acc)[Tiles<D>::kSlots], float factor, int hs) {
  const int lane = threadIdx.x % kWarp;
#pragma unroll
  for (int j = 0; j < Tiles<D>::kSlots; ++j) {
    const int d = lane + j * kWarp;
    if (d < hs) dst[d] = round_to<T>(acc[j] * factor);
  }
}

// The rows of a query tile (kRows rows from q0, n of them real): fills first_of (INT_MAX past n, so that no
// key is ever valid there) and returns the smallest first key, where the walk over key tiles starts.
template <int kRows>
__device__ int query_firsts(int* first_of, const int32_t* positions, int64_t row_start, int q0, int n) {
  if (threadIdx.x < kRows)
    first_of[threadIdx.x] = threadIdx.x < n ? first_key(positions, row_start, q0 + threadIdx.x) : INT_MAX;
  __syncthreads();
  int lo = q0 + n - 1;
  for (int r = 0; r < n; ++r) lo = min(lo, first_of[r]);
  return lo;
}

// ---- forward -------------------------------------------------------------------------------------------

// One key tile [k0, k0 + nk) against the block's queries: the warp's rows kk are tile rows warp + 4 * kk,
// lane = key for the scores, lane = head dimensions for the output.
template <int D, int kRpw>
__device__ void forward_step(const float* q_tile, const float* k_tile, const float* v_tile, int k0, int nk,
                             int q0, const int (&first)[kRpw], float (&m)[kRpw], float (&l)[kRpw],
                             float (&acc)[kRpw][Tiles<D>::kSlots], const Shape& s) {
  constexpr int kStride = Tiles<D>::kStride, kSlots = Tiles<D>::kSlots;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, key = k0 + lane;
  float p[kRpw] = {};
  for (int d = 0; d < s.hs; ++d) {
    const float kd = k_tile[lane * kStride + d];
#pragma unroll
    for (int kk = 0; kk < kRpw; ++kk) p[kk] = fmaf(q_tile[(warp + kk * kWarps) * kStride + d], kd, p[kk]);
  }
#pragma unroll
  for (int kk = 0; kk < kRpw; ++kk) {
    const int t = q0 + warp + kk * kWarps;
    const bool valid = lane < nk && key <= t && key >= first[kk];
    const float x = valid ? s.scale * p[kk] : kNegInf;
    const float m_new = fmaxf(m[kk], warp_max(x));
    const float alpha = m_new == kNegInf ? 1.0f : expf(m[kk] - m_new);  // rescales the old terms
    p[kk] = valid ? expf(x - m_new) : 0.0f;
    l[kk] = l[kk] * alpha + warp_sum(p[kk]);
    m[kk] = m_new;
#pragma unroll
    for (int j = 0; j < kSlots; ++j) acc[kk][j] *= alpha;
  }
  add_weighted_rows(acc, p, v_tile, D, nk, lane);  // acc += P V
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(T* __restrict__ out, float* __restrict__ lse, const T* __restrict__ qkv,
                   const int32_t* __restrict__ positions, Shape s) {
  constexpr int kRows = Tiles<D>::kForwardRows, kRpw = kRows / kWarps, kStride = Tiles<D>::kStride;
  __shared__ float q_tile[kRows * kStride], k_tile[kWarp * kStride], v_tile[kWarp * D];
  __shared__ int first_of[kRows];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;  // the longest (last) query tiles start first
  const int h = blockIdx.y, b = blockIdx.z, kv = h / (s.NH / s.NKV), n = min(kRows, s.T - q0);
  const int64_t row_start = static_cast<int64_t>(b) * s.T;
  const T* base = qkv + row_start * s.row;
  const T *xk = base + s.C + kv * s.hs, *xv = base + s.C + (s.NKV + kv) * s.hs;
  load_tile<D, kRows>(q_tile, kStride, base + q0 * s.row + h * s.hs, s.row, n, s.hs, s.vec);
  const int lo = query_firsts<kRows>(first_of, positions, row_start, q0, n);
  int first[kRpw];
  float m[kRpw], l[kRpw], acc[kRpw][Tiles<D>::kSlots] = {};
#pragma unroll
  for (int kk = 0; kk < kRpw; ++kk) {
    first[kk] = first_of[warp + kk * kWarps];
    m[kk] = kNegInf;
    l[kk] = 0.0f;
  }
  for (int k0 = lo; k0 < q0 + n; k0 += kWarp) {
    const int nk = min(kWarp, q0 + n - k0);
    __syncthreads();  // the previous step is done with the K and V tiles
    load_tile<D, kWarp>(k_tile, kStride, xk + k0 * s.row, s.row, nk, s.hs, s.vec);
    load_tile<D, kWarp>(v_tile, D, xv + k0 * s.row, s.row, nk, s.hs, s.vec);
    __syncthreads();
    forward_step<D, kRpw>(q_tile, k_tile, v_tile, k0, nk, q0, first, m, l, acc, s);
  }
#pragma unroll
  for (int kk = 0; kk < kRpw; ++kk) {
    const int r = warp + kk * kWarps, t = q0 + r;
    if (r >= n) continue;
    // A row with no key (only a bad position does that) gets zeros and lse = -inf, as on the CPU.
    store_row<D>(out + (row_start + t) * s.C + h * s.hs, acc[kk], l[kk] > 0 ? 1.0f / l[kk] : 0.0f, s.hs);
    if (lane == 0) lse[(static_cast<int64_t>(b) * s.NH + h) * s.T + t] = m[kk] + logf(l[kk]);
  }
}

// ---- backward: dK and dV -------------------------------------------------------------------------------

// One query tile (32 queries from q0, lane = query t) against the block's keys: the warp's keys kk are
// tile rows warp + 4 * kk; dv += P^T dO and dk += dS^T Q over the tile's queries in order.
template <int D, int kKpw>
__device__ void dkv_step(const float* q_tile, const float* do_tile, const float* k_tile, const float* v_tile,
                         int s0, int nk, int t, int first, float row_lse, float row_dot, int n,
                         float (&dk)[kKpw][Tiles<D>::kSlots], float (&dv)[kKpw][Tiles<D>::kSlots],
                         const Shape& s) {
  constexpr int kStride = Tiles<D>::kStride, kSlots = Tiles<D>::kSlots;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  float p[kKpw] = {}, ds[kKpw] = {};  // scores and dP, then P and dS
  for (int d = 0; d < s.hs; ++d) {
    const float qd = q_tile[lane * kStride + d], dod = do_tile[lane * kStride + d];
#pragma unroll
    for (int kk = 0; kk < kKpw; ++kk) {
      p[kk] = fmaf(qd, k_tile[(warp + kk * kWarps) * kStride + d], p[kk]);
      ds[kk] = fmaf(dod, v_tile[(warp + kk * kWarps) * kStride + d], ds[kk]);
    }
  }
#pragma unroll
  for (int kk = 0; kk < kKpw; ++kk) {
    const int c = warp + kk * kWarps, key = s0 + c;
    const bool valid = c < nk && key <= t && key >= first;
    p[kk] = valid ? expf(s.scale * p[kk] - row_lse) : 0.0f;
    ds[kk] = valid ? s.scale * p[kk] * (ds[kk] - row_dot) : 0.0f;
  }
  for (int r = 0; r < n; ++r) {
    float pr[kKpw], dsr[kKpw];
#pragma unroll
    for (int kk = 0; kk < kKpw; ++kk) {
      pr[kk] = __shfl_sync(kAllLanes, p[kk], r);
      dsr[kk] = __shfl_sync(kAllLanes, ds[kk], r);
    }
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      const float dod = do_tile[r * kStride + lane + j * kWarp], qd = q_tile[r * kStride + lane + j * kWarp];
#pragma unroll
      for (int kk = 0; kk < kKpw; ++kk) {
        dv[kk][j] = fmaf(pr[kk], dod, dv[kk][j]);
        dk[kk][j] = fmaf(dsr[kk], qd, dk[kk][j]);
      }
    }
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    dkv_kernel(T* __restrict__ dqkv, const T* __restrict__ dout, const T* __restrict__ qkv,
               const T* __restrict__ out, const float* __restrict__ lse,
               const int32_t* __restrict__ positions, Shape s) {
  constexpr int kKeys = Tiles<D>::kDkvKeys, kKpw = kKeys / kWarps, kStride = Tiles<D>::kStride;
  __shared__ float k_tile[kKeys * kStride], v_tile[kKeys * kStride];
  __shared__ float q_tile[kWarp * kStride], do_tile[kWarp * kStride], row_dots_of[kWarp];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int s0 = blockIdx.x * kKeys, g = blockIdx.y, b = blockIdx.z, group = s.NH / s.NKV;
  const int nk = min(kKeys, s.T - s0), last_key = s0 + nk - 1;
  const int64_t row_start = static_cast<int64_t>(b) * s.T;
  const T* base = qkv + row_start * s.row;
  load_tile<D, kKeys>(k_tile, kStride, base + s0 * s.row + s.C + g * s.hs, s.row, nk, s.hs, s.vec);
  load_tile<D, kKeys>(v_tile, kStride, base + s0 * s.row + s.C + (s.NKV + g) * s.hs, s.row, nk, s.hs, s.vec);
  float dk[kKpw][Tiles<D>::kSlots] = {}, dv[kKpw][Tiles<D>::kSlots] = {};
  for (int h = g * group; h < (g + 1) * group; ++h) {
    for (int q0 = s0; q0 < s.T; q0 += kWarp) {
      const int t = q0 + lane, n = min(kWarp, s.T - q0);
      const int first = t < s.T ? first_key(positions, row_start, t) : INT_MAX;
      // Also the barrier after the previous step: skip query tiles that reach none of the keys.
      if (!__syncthreads_or(first <= min(t, last_key))) continue;
      const int64_t dout_at = (row_start + q0) * s.C + h * s.hs;
      load_tile<D, kWarp>(q_tile, kStride, base + q0 * s.row + h * s.hs, s.row, n, s.hs, s.vec);
      load_tile<D, kWarp>(do_tile, kStride, dout + dout_at, s.C, n, s.hs, s.vec);
      const float row_lse = t < s.T ? lse[(static_cast<int64_t>(b) * s.NH + h) * s.T + t] : 0.0f;
      __syncthreads();
      row_dots<D, kWarp>(row_dots_of, do_tile, out + dout_at, s.C, n, s.hs);
      __syncthreads();
      dkv_step<D, kKpw>(q_tile, do_tile, k_tile, v_tile, s0, nk, t, first, row_lse, row_dots_of[lane], n, dk,
                        dv, s);
    }
  }
  T* dbase = dqkv + row_start * s.row;
#pragma unroll
  for (int kk = 0; kk < kKpw; ++kk) {
    const int c = warp + kk * kWarps;
    if (c >= nk) continue;
    store_row<D>(dbase + (s0 + c) * s.row + s.C + g * s.hs, dk[kk], 1.0f, s.hs);
    store_row<D>(dbase + (s0 + c) * s.row + s.C + (s.NKV + g) * s.hs, dv[kk], 1.0f, s.hs);
  }
}

// ---- backward: dQ --------------------------------------------------------------------------------------

// The rows of a dQ tile, per row the warp owns: its first key, lse and rowsum(dO * O).
template <int kRpw>
struct QueryRows {
  int first[kRpw];
  float lse[kRpw], dot[kRpw];
};

// One key tile [k0, k0 + nk) against the block's queries (lane = key for the scores, lane = head dimensions
// for dQ): dq += dS K.
template <int D, int kRpw>
__device__ void dq_step(const float* q_tile, const float* do_tile, const float* k_tile, const float* v_tile,
                        int k0, int nk, int q0, const QueryRows<kRpw>& rows,
                        float (&dq)[kRpw][Tiles<D>::kSlots], const Shape& s) {
  constexpr int kStride = Tiles<D>::kStride;
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp, key = k0 + lane;
  float p[kRpw] = {}, ds[kRpw] = {};  // scores and dP, then dS
  for (int d = 0; d < s.hs; ++d) {
    const float kd = k_tile[lane * kStride + d], vd = v_tile[lane * kStride + d];
#pragma unroll
    for (int kk = 0; kk < kRpw; ++kk) {
      p[kk] = fmaf(q_tile[(warp + kk * kWarps) * kStride + d], kd, p[kk]);
      ds[kk] = fmaf(do_tile[(warp + kk * kWarps) * kStride + d], vd, ds[kk]);
    }
  }
#pragma unroll
  for (int kk = 0; kk < kRpw; ++kk) {
    const int t = q0 + warp + kk * kWarps;
    const bool valid = lane < nk && key <= t && key >= rows.first[kk];
    const float prob = valid ? expf(s.scale * p[kk] - rows.lse[kk]) : 0.0f;
    ds[kk] = valid ? s.scale * prob * (ds[kk] - rows.dot[kk]) : 0.0f;
  }
  add_weighted_rows(dq, ds, k_tile, kStride, nk, lane);  // dq += dS K
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(T* __restrict__ dqkv, const T* __restrict__ dout, const T* __restrict__ qkv,
              const T* __restrict__ out, const float* __restrict__ lse, const int32_t* __restrict__ positions,
              Shape s) {
  constexpr int kRows = Tiles<D>::kDqRows, kRpw = kRows / kWarps, kStride = Tiles<D>::kStride;
  __shared__ float q_tile[kRows * kStride], do_tile[kRows * kStride];
  __shared__ float k_tile[kWarp * kStride], v_tile[kWarp * kStride], row_dots_of[kRows];
  __shared__ int first_of[kRows];
  const int warp = threadIdx.x / kWarp;
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kRows;  // the longest (last) query tiles start first
  const int h = blockIdx.y, b = blockIdx.z, kv = h / (s.NH / s.NKV), n = min(kRows, s.T - q0);
  const int64_t row_start = static_cast<int64_t>(b) * s.T, dout_at = (row_start + q0) * s.C + h * s.hs;
  const T* base = qkv + row_start * s.row;
  const T *xk = base + s.C + kv * s.hs, *xv = base + s.C + (s.NKV + kv) * s.hs;
  load_tile<D, kRows>(q_tile, kStride, base + q0 * s.row + h * s.hs, s.row, n, s.hs, s.vec);
  load_tile<D, kRows>(do_tile, kStride, dout + dout_at, s.C, n, s.hs, s.vec);
  const int lo = query_firsts<kRows>(first_of, positions, row_start, q0, n);  // syncs: do_tile is ready
  row_dots<D, kRows>(row_dots_of, do_tile, out + dout_at, s.C, n, s.hs);
  __syncthreads();
  QueryRows<kRpw> rows;
#pragma unroll
  for (int kk = 0; kk < kRpw; ++kk) {
    const int r = warp + kk * kWarps;
    rows.first[kk] = first_of[r];
    rows.lse[kk] = r < n ? lse[(static_cast<int64_t>(b) * s.NH + h) * s.T + q0 + r] : 0.0f;
    rows.dot[kk] = row_dots_of[r];
  }
  float dq[kRpw][Tiles<D>::kSlots] = {};
  for (int k0 = lo; k0 < q0 + n; k0 += kWarp) {
    const int nk = min(kWarp, q0 + n - k0);
    __syncthreads();  // the previous step is done with the K and V tiles
    load_tile<D, kWarp>(k_tile, kStride, xk + k0 * s.row, s.row, nk, s.hs, s.vec);
    load_tile<D, kWarp>(v_tile, kStride, xv + k0 * s.row, s.row, nk, s.hs, s.vec);
    __syncthreads();
    dq_step<D, kRpw>(q_tile, do_tile, k_tile, v_tile, k0, nk, q0, rows, dq, s);
  }
  T* dbase = dqkv + row_start * s.row;
#pragma unroll
  for (int kk = 0; kk < kRpw; ++kk) {
    const int r = warp + kk * kWarps;
    if (r < n) store_row<D>(dbase + (q0 + r) * s.row + h * s.hs, dq[kk], 1.0f, s.hs);
  }
}

// ---- host side -----------------------------------------------------------------------------------------

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <typename T>
Shape shape_for(int64_t B, int64_t T_len, int64_t C, int64_t NH, int64_t NKV, const char* what) {
  if (NH <= 0 || NKV <= 0 || NH % NKV != 0 || C % NH != 0 || C / NH < 1 || C / NH > 128 || B > 65535 ||
      NH > 65535 || T_len > INT_MAX / 2)
    throw std::invalid_argument(std::string("cuda backend: ") + what + ": unsupported shape (head size " +
                                std::to_string(NH > 0 ? C / NH : 0) + ", at most 128)");
  const int hs = static_cast<int>(C / NH);
  return {static_cast<int>(T_len),
          static_cast<int>(NH),
          static_cast<int>(NKV),
          hs,
          C,
          C + 2 * NKV * hs,
          1.0f / sqrtf(static_cast<float>(hs)),
          hs * sizeof(T) % 16 == 0};
}

// Calls f with the head-size bucket (std::integral_constant<int, 32, 64 or 128>) that holds hs.
template <typename F>
void with_bucket(int hs, F&& f) {
  if (hs <= 32) {
    f(std::integral_constant<int, 32>{});
  } else if (hs <= 64) {
    f(std::integral_constant<int, 64>{});
  } else {
    f(std::integral_constant<int, 128>{});
  }
}

}  // namespace

template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, const int32_t* positions, int64_t B, int64_t T_len,
                       int64_t C, int64_t NH, int64_t NKV, float* /*scratch: none needed*/,
                       cudaStream_t stream) {
  if (B == 0 || T_len == 0) return;
  Shape s = shape_for<T>(B, T_len, C, NH, NKV, "attention_forward");
  s.vec = s.vec && aligned16(qkv);
  with_bucket(s.hs, [&](auto bucket) {
    constexpr int D = decltype(bucket)::value;
    const dim3 grid(ceil_div(T_len, Tiles<D>::kForwardRows), NH, B);
    forward_kernel<T, D><<<grid, kThreads, 0, stream>>>(out, lse, qkv, positions, s);
  });
  check_launch("attention_forward");
}

template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
                        const int32_t* positions, int64_t B, int64_t T_len, int64_t C, int64_t NH,
                        int64_t NKV, float* /*scratch: none needed*/, cudaStream_t stream) {
  if (B == 0 || T_len == 0) return;
  Shape s = shape_for<T>(B, T_len, C, NH, NKV, "attention_backward");
  s.vec = s.vec && aligned16(qkv) && aligned16(dout);
  with_bucket(s.hs, [&](auto bucket) {
    constexpr int D = decltype(bucket)::value;
    const dim3 dkv_grid(ceil_div(T_len, Tiles<D>::kDkvKeys), NKV, B);
    dkv_kernel<T, D><<<dkv_grid, kThreads, 0, stream>>>(dqkv, dout, qkv, out, lse, positions, s);
    check_launch("attention_backward");
    const dim3 dq_grid(ceil_div(T_len, Tiles<D>::kDqRows), NH, B);
    dq_kernel<T, D><<<dq_grid, kThreads, 0, stream>>>(dqkv, dout, qkv, out, lse, positions, s);
    check_launch("attention_backward");
  });
}

#define MT_ATTENTION_INSTANTIATE(T)                                                                   \
  template void attention_forward<T>(T*, float*, const T*, const int32_t*, int64_t, int64_t, int64_t, \
                                     int64_t, int64_t, float*, cudaStream_t);                         \
  template void attention_backward<T>(T*, const T*, const T*, const T*, const float*, const int32_t*, \
                                      int64_t, int64_t, int64_t, int64_t, int64_t, float*, cudaStream_t);
MT_ATTENTION_INSTANTIATE(float)
MT_ATTENTION_INSTANTIATE(bf16)
MT_ATTENTION_INSTANTIATE(f16)
#undef MT_ATTENTION_INSTANTIATE

}  // namespace mt::cuda
