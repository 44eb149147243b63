// 16-bit causal attention as matrix products on blocks of kBlock queries. For one (batch, head) and the
// queries [i0, i0 + M), against the keys [0, n = i0 + M):
//   forward:  S = Q K^T; P = softmax(scale * S) in fp32, lse kept; O = P V
//   backward: S, and dP = dO V^T; P = exp(scale * S - lse); dS = scale * P * (dP - D), D = rowsum(dO * O);
//             dQ = dS K; dK^T += Q^T dS; dV^T += dO^T P
// bf16 operands go to the products as they are, with P and dS rounded to bf16 (as flash-attention
// implementations do); f16 operands are widened to fp32 (these CPUs have no f16 products), so for f16, P and
// dS stay fp32. dK and dV are summed transposed in fp32 over the query heads of their group and the query
// blocks, in order, and rounded into dqkv once. One (batch, head) is one OpenMP task in the forward, one
// (batch, key/value head) in the backward, so no result depends on the thread count.
#include "backend/cpu/attention_16bit.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/attention_tiles.h"
#include "backend/cpu/isa_variant.h"
#include "backend/cpu/typed_io.h"
#include "backend/cpu/vec_math.h"

namespace mt::kernels {

namespace MT_ISA {

namespace {

constexpr int64_t kBlock = 64;  // queries per block; even, so query pairs fill bf16 lanes

// The product lane of a storage type: a bf16 pair, or one fp32 for f16.
template <typename T>
struct LaneFor {
  using type = uint32_t;
};
template <>
struct LaneFor<f16> {
  using type = float;
};

// One head's sizes, in lanes (4 bytes) or floats.
struct Dims {
  int64_t T, hs, pack;
  int64_t hl;      // lanes along the head dimension
  int64_t tl;      // lanes along the keys
  int64_t bq;      // rows of a block's buffers: kBlock, or fewer for short sequences (even, for pairs)
  int64_t bl;      // lanes along a block's queries
  int64_t tn, hn;  // T and hs padded to whole vectors: the row strides of B and C operands

  Dims(int64_t T_len, int64_t head_size, int64_t values_per_lane)
      : T(T_len),
        hs(head_size),
        pack(values_per_lane),
        hl(ceil_div(hs, pack)),
        tl(ceil_div(T, pack)),
        bq(std::min(kBlock, round_up(T, 2))),
        bl(bq / pack),
        tn(round_up(T, kVec)),
        hn(round_up(hs, kVec)) {}
};

// One thread's buffers. A products' A operands are [rows][lanes], B operands [lanes][columns].
template <typename Lane>
struct Buffers {
  Lane *kt, *vt;     // [hl][tn]: K^T and V^T, B of S = Q K^T and dP = dO V^T
  Lane* kv;          // [tl][hn]: V (forward) or K (backward) by key pairs, B of O = P V and dQ = dS K
  Lane *qa, *da;     // [bq][hl]: the block's Q and dO, A of S and dP
  Lane *qt, *dt;     // [hs][bl]: the block's Q^T and dO^T, A of dK^T and dV^T
  Lane* rows;        // [bq][tl]: P (forward) or dS (backward), A of O and dQ
  Lane *pi, *si;     // [bl][tn]: P and dS by query pairs, B of dV^T and dK^T
  float *s, *dp;     // [bq][tn]: scores, then P; dP, then dS
  float* o;          // [bq][hn]: O or dQ before rounding
  float *dkt, *dvt;  // [hs][tn]: dK^T and dV^T sums
  float* tmp;        // [2 * hn]: fp32 rows of dO and O
  float* D;          // [bq]: rowsum(dO * O) of the block's queries
  float* staging;    // [T][hn]: what goes into a transposed buffer, or comes out of dK^T and dV^T
};

// Cuts buffers off a scratch area in whole vectors, which keeps each one aligned like the area; with a
// null area it only counts.
class Carve {
 public:
  explicit Carve(float* base) : base_(base) {}

  template <typename X>
  X* take(int64_t n) {
    X* p = base_ ? reinterpret_cast<X*>(base_ + used_) : nullptr;
    used_ += round_up(n, kVec);
    return p;
  }
  int64_t used() const { return used_; }

 private:
  float* base_;
  int64_t used_ = 0;
};

template <typename Lane>
Buffers<Lane> carve_buffers(Carve& c, const Dims& d) {
  Buffers<Lane> b;
  b.kt = c.take<Lane>(d.hl * d.tn);
  b.vt = c.take<Lane>(d.hl * d.tn);
  b.kv = c.take<Lane>(d.tl * d.hn);
  b.qa = c.take<Lane>(d.bq * d.hl);
  b.da = c.take<Lane>(d.bq * d.hl);
  b.qt = c.take<Lane>(d.hs * d.bl);
  b.dt = c.take<Lane>(d.hs * d.bl);
  b.rows = c.take<Lane>(d.bq * d.tl);
  b.pi = c.take<Lane>(d.bl * d.tn);
  b.si = c.take<Lane>(d.bl * d.tn);
  b.s = c.take<float>(d.bq * d.tn);
  b.dp = c.take<float>(d.bq * d.tn);
  b.o = c.take<float>(d.bq * d.hn);
  b.dkt = c.take<float>(d.hs * d.tn);
  b.dvt = c.take<float>(d.hs * d.tn);
  b.tmp = c.take<float>(2 * d.hn);
  b.D = c.take<float>(d.bq);
  b.staging = c.take<float>(d.T * d.hn);
  return b;
}

Dims dims_for(int64_t T, int64_t hs, DType dtype) {
  return {T, hs, dtype == DType::bf16 ? 2 : 1};
}

int64_t scratch_floats(const Dims& d) {
  Carve c(nullptr);
  carve_buffers<float>(c, d);
  return c.used();
}

// dst[j] = the lane of values x[pack * j], x[pack * j + 1]: n values, a multiple of the pack; fp32 values
// (P, dS) are rounded to bf16 operands.
inline void lanes_along(uint32_t* dst, const float* x, int64_t n) {
  bf16_lanes_along(dst, x, n);
}
inline void lanes_along(float* dst, const float* x, int64_t n) {
  std::copy_n(x, n, dst);
}

// The same from a row of n values of storage: bf16 pairs are the row's bytes (an odd n leaves the last
// lane half zero); f16 is widened.
inline void lanes_along(uint32_t* dst, const bf16* src, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n / 2; ++j)
    dst[j] = src[2 * j].bits | static_cast<uint32_t>(src[2 * j + 1].bits) << 16;
  if (n % 2) dst[n / 2] = src[n - 1].bits;
}
inline void lanes_along(float* dst, const f16* src, int64_t n) {
  convert_n(dst, src, n);
}

// dst[j] = the lane of values (r0[j], r1[j]) for j < n: two rows by pairs; a null r1 counts as zeros, and
// fp32 lanes take r0 alone.
inline void lanes_across(uint32_t* dst, const bf16* r0, const bf16* r1, int64_t n) {
  if (r1) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) dst[j] = r0[j].bits | static_cast<uint32_t>(r1[j].bits) << 16;
  } else {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) dst[j] = r0[j].bits;
  }
}
inline void lanes_across(float* dst, const f16* r0, const f16* /*r1*/, int64_t n) {
  convert_n(dst, r0, n);
}

// From fp32 rows (P, dS): rounded to bf16 operands.
inline void lanes_across(uint32_t* dst, const float* r0, const float* r1, int64_t n) {
  bf16_lanes_across(dst, r0, r1, n);
}
inline void lanes_across(float* dst, const float* r0, const float* /*r1*/, int64_t n) {
  std::copy_n(r0, n, dst);
}

// Row i of dst (stride ld) = the lanes of rows pack * i and pack * i + 1 of src, for i < rows / pack rounded
// up; n values a row.
template <typename Lane, typename T>
void pair_rows(Lane* dst, int64_t ld, const T* src, int64_t ld_src, int64_t rows, int64_t n) {
  constexpr int64_t pack = kPack<Lane>;
  for (int64_t i = 0; i < ceil_div(rows, pack); ++i) {
    const T* r0 = src + pack * i * ld_src;
    lanes_across(dst + i * ld, r0, pack == 2 && pack * i + 1 < rows ? r0 + ld_src : nullptr, n);
  }
}

// dst[j][s] (row stride ld) = lane j of row s of src (stride ld_src), s < rows: through staging, whose
// rows of lanes are contiguous and then transposed in blocks.
template <typename Lane, typename T>
void transpose_lanes(Lane* dst, int64_t ld, const T* src, int64_t ld_src, int64_t rows, int64_t n,
                     float* staging) {
  const int64_t lanes = ceil_div(n, kPack<Lane>);
  Lane* rows_of_lanes = reinterpret_cast<Lane*>(staging);
  for (int64_t s = 0; s < rows; ++s) lanes_along(rows_of_lanes + s * lanes, src + s * ld_src, n);
  transpose(dst, ld, rows_of_lanes, lanes, rows, lanes);
}

// The same for pairs of rows: dst[j][i] = the lane of (src[pack * i][j], src[pack * i + 1][j]).
template <typename Lane, typename T>
void transpose_pairs(Lane* dst, int64_t ld, const T* src, int64_t ld_src, int64_t rows, int64_t n,
                     float* staging) {
  Lane* pairs = reinterpret_cast<Lane*>(staging);
  pair_rows(pairs, n, src, ld_src, rows, n);
  transpose(dst, ld, pairs, n, ceil_div(rows, kPack<Lane>), n);
}

// Rounds acc^T into rows s < rows of dst (stride ld); acc is [n][ld_acc].
template <typename T>
void store_transposed(T* dst, int64_t ld, const float* acc, int64_t ld_acc, int64_t rows, int64_t n,
                      float* staging) {
  transpose(staging, n, acc, ld_acc, n, rows);
  for (int64_t s = 0; s < rows; ++s) convert_n(dst + s * ld, staging + s * n, n);
}

float dot(const float* a, const float* b, int64_t n) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Sum of a vector of partial sums, in a fixed order.
float sum_lanes(const float (&x)[kVec]) {
  float sum = 0;
  for (float v : x) sum += v;
  return sum;
}

// Turns raw scores p[first..t] into softmax(scale * p), and p[0..first) and p[t + 1..end) into zeros, end =
// t + 1 rounded up to whole vectors; returns the log-sum-exp of the scaled scores. The loops run whole
// vectors, masking keys outside [first, t], and keep one partial max or sum per lane: no remainder loops and
// one horizontal step per row, which the short rows of the first blocks would otherwise spend most of their
// time in.
float softmax_row(float* p, int64_t first, int64_t t, float scale) {
  const int64_t end = round_up(t + 1, kVec);
  float part[kVec];
  std::fill_n(part, kVec, -std::numeric_limits<float>::infinity());
  for (int64_t s0 = 0; s0 < end; s0 += kVec) {
    const int64_t lo = first - s0, last = t - s0;  // lanes lo <= l <= last are keys first..t
#pragma omp simd
    for (int64_t l = 0; l < kVec; ++l) {
      const float x = p[s0 + l];  // read whatever is past t: selecting, not branching, keeps the loop whole
      part[l] = l >= lo && l <= last && x > part[l] ? x : part[l];
    }
  }
  const float max = scale * *std::max_element(part, part + kVec);  // scale > 0
  std::fill_n(part, kVec, 0.0f);
  for (int64_t s0 = 0; s0 < end; s0 += kVec) {
    const int64_t lo = first - s0, last = t - s0;
#pragma omp simd
    for (int64_t l = 0; l < kVec; ++l) {
      const float e = vexp(scale * p[s0 + l] - max);
      p[s0 + l] = l >= lo && l <= last ? e : 0.0f;
      part[l] += p[s0 + l];
    }
  }
  const float sum = sum_lanes(part), inv = 1.0f / sum;
  for (int64_t s0 = 0; s0 < end; s0 += kVec) {
#pragma omp simd
    for (int64_t l = 0; l < kVec; ++l) p[s0 + l] *= inv;
  }
  return max + std::log(sum);
}

// Turns a row of raw scores p and of dP into P = exp(scale * p - lse) and dS = scale * P * (dP - D) for
// keys first..t, and zeros elsewhere up to width (whole vectors). The products left both rows unwritten past
// the diagonal: whatever is there is read and then not selected.
void dsoftmax_row(float* p, float* dp, int64_t first, int64_t t, float lse, float D, float scale,
                  int64_t width) {
  for (int64_t c = 0; c < width; c += kVec) {
    const int64_t lo = first - c, last = t - c;
#pragma omp simd
    for (int64_t l = 0; l < kVec; ++l) {
      const float e = vexp(scale * p[c + l] - lse);
      const float g = scale * e * (dp[c + l] - D);
      const bool key = l >= lo && l <= last;
      p[c + l] = key ? e : 0.0f;
      dp[c + l] = key ? g : 0.0f;
    }
  }
}

}  // namespace

template <typename T>
void attention16_forward(T* out, float* lse, const T* qkv, const int32_t* positions, int64_t B, int64_t T_len,
                         const QkvLayout& qkv_at, float* scratch) {
  using Lane = typename LaneFor<T>::type;
  const Dims d = dims_for(T_len, qkv_at.hs, dtype_of<T>());
  const int64_t C = qkv_at.C, NH = qkv_at.NH, row = qkv_at.row(), per_thread = scratch_floats(d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d.hs));
  // Dynamic: when other processes hold a core, the other threads take its heads.
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      Carve carve(scratch + omp_get_thread_num() * per_thread);
      const Buffers<Lane> buf = carve_buffers<Lane>(carve, d);
      const T* base = qkv + b * T_len * row;  // rows `row` apart
      const T* q = base + qkv_at.q(h);
      transpose_lanes(buf.kt, d.tn, base + qkv_at.k(h), row, T_len, d.hs, buf.staging);
      pair_rows(buf.kv, d.hn, base + qkv_at.v(h), row, T_len, d.hs);
      for (int64_t i0 = 0; i0 < T_len; i0 += kBlock) {
        const int64_t M = std::min(kBlock, T_len - i0), n = i0 + M, n_lanes = ceil_div(n, d.pack);
        for (int64_t r = 0; r < M; ++r) lanes_along(buf.qa + r * d.hl, q + (i0 + r) * row, d.hs);
        tile_product(buf.s, d.tn, buf.qa, d.hl, buf.kt, d.tn, M, n, d.hl, false, Causal::columns, i0);
        for (int64_t r = 0; r < M; ++r) {
          const int64_t t = i0 + r;
          float* p = buf.s + r * d.tn;
          lse[(b * NH + h) * T_len + t] = softmax_row(p, first_key(positions, b * T_len, t), t, scale);
          // The masked keys the lanes reach.
          std::fill(p + std::min(round_up(t + 1, kVec), n_lanes * d.pack), p + n_lanes * d.pack, 0.0f);
          lanes_along(buf.rows + r * d.tl, p, n_lanes * d.pack);
        }
        tile_product(buf.o, d.hn, buf.rows, d.tl, buf.kv, d.hn, M, d.hs, n_lanes, false, Causal::depth, i0);
        for (int64_t r = 0; r < M; ++r)
          convert_n(out + (b * T_len + i0 + r) * C + h * d.hs, buf.o + r * d.hn, d.hs);
      }
    }
  }
}

// One task per (batch, key/value head): K and V are packed once for the group's query heads, which add into
// the same dK and dV sums in order.
template <typename T>
void attention16_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
                          const int32_t* positions, int64_t B, int64_t T_len, const QkvLayout& qkv_at,
                          float* scratch) {
  using Lane = typename LaneFor<T>::type;
  const Dims d = dims_for(T_len, qkv_at.hs, dtype_of<T>());
  const int64_t C = qkv_at.C, NH = qkv_at.NH, row = qkv_at.row(), group = NH / qkv_at.NKV;
  const int64_t hs = d.hs, per_thread = scratch_floats(d);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t g = 0; g < qkv_at.NKV; ++g) {
      Carve carve(scratch + omp_get_thread_num() * per_thread);
      const Buffers<Lane> buf = carve_buffers<Lane>(carve, d);
      const T* base = qkv + b * T_len * row;
      T* dbase = dqkv + b * T_len * row;
      const int64_t h0 = g * group;
      transpose_lanes(buf.kt, d.tn, base + qkv_at.k(h0), row, T_len, hs, buf.staging);
      transpose_lanes(buf.vt, d.tn, base + qkv_at.v(h0), row, T_len, hs, buf.staging);
      pair_rows(buf.kv, d.hn, base + qkv_at.k(h0), row, T_len, hs);
      std::fill_n(buf.dkt, hs * d.tn, 0.0f);
      std::fill_n(buf.dvt, hs * d.tn, 0.0f);
      for (int64_t h = h0; h < h0 + group; ++h) {
        const T* q = base + qkv_at.q(h);
        T* dq = dbase + qkv_at.q(h);
        for (int64_t i0 = 0; i0 < T_len; i0 += kBlock) {
          const int64_t M = std::min(kBlock, T_len - i0), n = i0 + M;
          const int64_t n_lanes = ceil_div(n, d.pack), m_lanes = ceil_div(M, d.pack);
          const T* dy = dout + (b * T_len + i0) * C + h * hs;  // rows C apart, as y
          const T* y = out + (b * T_len + i0) * C + h * hs;
          for (int64_t r = 0; r < M; ++r) {
            lanes_along(buf.qa + r * d.hl, q + (i0 + r) * row, hs);
            lanes_along(buf.da + r * d.hl, dy + r * C, hs);
            // dsoftmax: ds = p * (dp - sum_s p_s dp_s), and sum_s p_s dp_s = dot(dout_t, out_t) = D.
            convert_n(buf.tmp, dy + r * C, hs);
            convert_n(buf.tmp + hs, y + r * C, hs);
            buf.D[r] = dot(buf.tmp, buf.tmp + hs, hs);
          }
          transpose_pairs(buf.qt, d.bl, q + i0 * row, row, M, hs, buf.staging);
          transpose_pairs(buf.dt, d.bl, dy, C, M, hs, buf.staging);
          tile_product(buf.s, d.tn, buf.qa, d.hl, buf.kt, d.tn, M, n, d.hl, false, Causal::columns, i0);
          tile_product(buf.dp, d.tn, buf.da, d.hl, buf.vt, d.tn, M, n, d.hl, false, Causal::columns, i0);
          // P and dS in fp32, zero past the diagonal up to whole vectors: the dK^T and dV^T products read
          // them (by query pairs) as B, a vector at a time.
          const int64_t width = round_up(n, kVec);
          for (int64_t r = 0; r < M; ++r) {
            dsoftmax_row(buf.s + r * d.tn, buf.dp + r * d.tn, first_key(positions, b * T_len, i0 + r), i0 + r,
                         lse[(b * NH + h) * T_len + i0 + r], buf.D[r], scale, width);
            lanes_along(buf.rows + r * d.tl, buf.dp + r * d.tn, n_lanes * d.pack);
          }
          pair_rows(buf.pi, d.tn, buf.s, d.tn, M, width);
          pair_rows(buf.si, d.tn, buf.dp, d.tn, M, width);
          tile_product(buf.o, d.hn, buf.rows, d.tl, buf.kv, d.hn, M, hs, n_lanes, false, Causal::depth, i0);
          for (int64_t r = 0; r < M; ++r) convert_n(dq + (i0 + r) * row, buf.o + r * d.hn, hs);
          tile_product(buf.dkt, d.tn, buf.qt, d.bl, buf.si, d.tn, hs, n, m_lanes, true);
          tile_product(buf.dvt, d.tn, buf.dt, d.bl, buf.pi, d.tn, hs, n, m_lanes, true);
        }
      }
      store_transposed(dbase + qkv_at.k(h0), row, buf.dkt, d.tn, T_len, hs, buf.staging);
      store_transposed(dbase + qkv_at.v(h0), row, buf.dvt, d.tn, T_len, hs, buf.staging);
    }
  }
}

}  // namespace MT_ISA

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
int64_t attention16_scratch_per_thread(int64_t T, int64_t head_size, DType dtype) {
  return MT_ISA::scratch_floats(MT_ISA::dims_for(T, head_size, dtype));
}

template <typename T>
void attention16_forward(T* out, float* lse, const T* qkv, const int32_t* positions, int64_t B, int64_t T_len,
                         const QkvLayout& qkv_at, float* scratch) {
  dispatch<&attention16_forward<T>>(out, lse, qkv, positions, B, T_len, qkv_at, scratch);
}
template <typename T>
void attention16_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
                          const int32_t* positions, int64_t B, int64_t T_len, const QkvLayout& qkv_at,
                          float* scratch) {
  dispatch<&attention16_backward<T>>(dqkv, dout, qkv, out, lse, positions, B, T_len, qkv_at, scratch);
}

template void attention16_forward<bf16>(bf16*, float*, const bf16*, const int32_t*, int64_t, int64_t,
                                        const QkvLayout&, float*);
template void attention16_forward<f16>(f16*, float*, const f16*, const int32_t*, int64_t, int64_t,
                                       const QkvLayout&, float*);
template void attention16_backward<bf16>(bf16*, const bf16*, const bf16*, const bf16*, const float*,
                                         const int32_t*, int64_t, int64_t, const QkvLayout&, float*);
template void attention16_backward<f16>(f16*, const f16*, const f16*, const f16*, const float*,
                                        const int32_t*, int64_t, int64_t, const QkvLayout&, float*);
#endif

namespace MT_ISA {
// Enrolled at start-up; the helpers are this file's own (other files have their namesakes).
namespace {
template <typename T>
bool enroll_type() {
  return enroll<&kernels::attention16_forward<T>>(attention16_forward) &&
         enroll<&kernels::attention16_backward<T>>(attention16_backward);
}
const bool enrolled = enroll_type<bf16>() && enroll_type<f16>();
}  // namespace
}  // namespace MT_ISA

}  // namespace mt::kernels
