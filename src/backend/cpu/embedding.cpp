// Token + position embedding. Backward adds the rows of dout to the gradient rows in (b, t) order, so a token
// that repeats is summed in the same order for any thread count, without atomics.
#include "backend/cpu/embedding.h"

#include <algorithm>
#include <type_traits>

#include "backend/cpu/column_blocks.h"
#include "backend/cpu/isa_variant.h"
#include "backend/cpu/typed_io.h"

namespace mt::kernels {

namespace MT_ISA {

namespace {

// Columns summed per pass of add_rows: its fp32 accumulator lives on the stack.
constexpr int64_t kChunk = 1024;

// row = row + sum of dout[bt] over the bt in [begin, end), `step` apart, that `selected` accepts, in
// increasing bt; the sum is fp32, starts from row's value and is rounded once.
template <typename T, typename G, typename Selected>
void add_rows(G* row, const T* dout, int64_t C, int64_t begin, int64_t end, int64_t step,
              const Selected& selected) {
  for (int64_t j0 = 0; j0 < C; j0 += kChunk) {
    const int64_t n = std::min(kChunk, C - j0);
    float acc[kChunk];
    for (int64_t j = 0; j < n; ++j) acc[j] = widen(row[j0 + j]);
    for (int64_t bt = begin; bt < end; bt += step) {
      if (!selected(bt)) continue;
      const T* dy = dout + bt * C + j0;
#pragma omp simd
      for (int64_t j = 0; j < n; ++j) acc[j] += widen(dy[j]);
    }
    for (int64_t j = 0; j < n; ++j) row[j0 + j] = narrow<G>(acc[j]);
  }
}

int64_t position(const int32_t* positions, int64_t bt, int64_t T_len) {
  return positions ? positions[bt] : bt % T_len;
}

}  // namespace

template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const int32_t* positions, const T* wte, const T* wpe,
                       int64_t B, int64_t T_len, int64_t C, VocabRows vocab) {
#pragma omp parallel for
  for (int64_t bt = 0; bt < B * T_len; ++bt) {
    T* y = out + bt * C;
    const T* pos = wpe ? wpe + position(positions, bt, T_len) * C : nullptr;
    if (!vocab.holds(tokens[bt])) {
      if (pos)
        std::copy_n(pos, C, y);
      else
        std::fill_n(y, C, T{});
      continue;
    }
    const T* tok = wte + (tokens[bt] - vocab.begin) * C;
    if (!pos) {
      std::copy_n(tok, C, y);
      continue;
    }
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) y[j] = narrow<T>(widen(tok[j]) + widen(pos[j]));
  }
}

template <typename T, typename G>
void embedding_backward(G* dwte, G* dwpe, const T* dout, const int32_t* tokens, const int32_t* positions,
                        int64_t B, int64_t T_len, int64_t C, VocabRows vocab) {
  const int64_t BT = B * T_len;
  if constexpr (std::is_same_v<G, float>) {
    // fp32 gradients accumulate in place: each task owns a block of columns and walks all tokens.
    parallel_over_column_blocks(C, [&](int64_t j0, int64_t j1) {
      for (int64_t bt = 0; bt < BT; ++bt) {
        const T* dy = dout + bt * C;
        if (dwte && vocab.holds(tokens[bt])) {
          float* tok = dwte + (tokens[bt] - vocab.begin) * C;
#pragma omp simd
          for (int64_t j = j0; j < j1; ++j) tok[j] += widen(dy[j]);
        }
        if (!dwpe) continue;
        float* pos = dwpe + position(positions, bt, T_len) * C;
#pragma omp simd
        for (int64_t j = j0; j < j1; ++j) pos[j] += widen(dy[j]);
      }
    });
  } else {
    // A 16-bit gradient rounded per add would drop the small contributions of frequent tokens, so each row
    // is owned by one task, which sums its contributions in fp32 and rounds once.
#pragma omp parallel for
    for (int64_t t = 0; t < (dwpe ? T_len : 0); ++t) {
      add_rows(dwpe + t * C, dout, C, 0, BT, 1,
               [&](int64_t bt) { return position(positions, bt, T_len) == t; });
    }
    // The first occurrence of a token owns its row. Tasks get costlier with bt (the search for an earlier
    // occurrence), hence the dynamic schedule; it does not change any sum.
#pragma omp parallel for schedule(dynamic, 16)
    for (int64_t bt = 0; bt < (dwte ? BT : 0); ++bt) {
      const int32_t token = tokens[bt];
      if (!vocab.holds(token) || std::find(tokens, tokens + bt, token) != tokens + bt) continue;
      add_rows(dwte + (token - vocab.begin) * C, dout, C, bt, BT, 1,
               [&](int64_t other) { return tokens[other] == token; });
    }
  }
}

}  // namespace MT_ISA

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const int32_t* positions, const T* wte, const T* wpe,
                       int64_t B, int64_t T_len, int64_t C, VocabRows vocab) {
  dispatch<&embedding_forward<T>>(out, tokens, positions, wte, wpe, B, T_len, C, vocab);
}
template <typename T, typename G>
void embedding_backward(G* dwte, G* dwpe, const T* dout, const int32_t* tokens, const int32_t* positions,
                        int64_t B, int64_t T_len, int64_t C, VocabRows vocab) {
  dispatch<&embedding_backward<T, G>>(dwte, dwpe, dout, tokens, positions, B, T_len, C, vocab);
}

template void embedding_forward<float>(float*, const int32_t*, const int32_t*, const float*, const float*,
                                       int64_t, int64_t, int64_t, VocabRows);
template void embedding_forward<bf16>(bf16*, const int32_t*, const int32_t*, const bf16*, const bf16*,
                                      int64_t, int64_t, int64_t, VocabRows);
template void embedding_forward<f16>(f16*, const int32_t*, const int32_t*, const f16*, const f16*, int64_t,
                                     int64_t, int64_t, VocabRows);
template void embedding_backward<float, float>(float*, float*, const float*, const int32_t*, const int32_t*,
                                               int64_t, int64_t, int64_t, VocabRows);
template void embedding_backward<bf16, float>(float*, float*, const bf16*, const int32_t*, const int32_t*,
                                              int64_t, int64_t, int64_t, VocabRows);
template void embedding_backward<bf16, bf16>(bf16*, bf16*, const bf16*, const int32_t*, const int32_t*,
                                             int64_t, int64_t, int64_t, VocabRows);
template void embedding_backward<f16, float>(float*, float*, const f16*, const int32_t*, const int32_t*,
                                             int64_t, int64_t, int64_t, VocabRows);
#endif

namespace MT_ISA {
// Enrolled at start-up; the helpers are this file's own (other files have their namesakes).
namespace {
const bool enrolled = enroll<&kernels::embedding_forward<float>>(embedding_forward) &&
                      enroll<&kernels::embedding_forward<bf16>>(embedding_forward) &&
                      enroll<&kernels::embedding_forward<f16>>(embedding_forward) &&
                      enroll<&kernels::embedding_backward<float, float>>(embedding_backward) &&
                      enroll<&kernels::embedding_backward<bf16, float>>(embedding_backward) &&
                      enroll<&kernels::embedding_backward<bf16, bf16>>(embedding_backward) &&
                      enroll<&kernels::embedding_backward<f16, float>>(embedding_backward);
}  // namespace
}  // namespace MT_ISA

}  // namespace mt::kernels
