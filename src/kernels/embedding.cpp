// Token + position embedding. Backward splits the columns among threads and walks the tokens in (b, t)
// order, so a token that repeats is summed in the same order for any thread count, without atomics.
#include "kernels/embedding.h"

#include "kernels/column_blocks.h"

namespace mt::kernels {

template <>
void embedding_forward<float>(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                              int64_t B, int64_t T, int64_t C) {
#pragma omp parallel for
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const float* tok = wte + static_cast<int64_t>(tokens[bt]) * C;
    const float* pos = wpe + (bt % T) * C;
    float* y = out + bt * C;
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) y[j] = tok[j] + pos[j];
  }
}

template <>
void embedding_backward<float, float>(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                                      int64_t B, int64_t T, int64_t C) {
  parallel_over_column_blocks(C, [&](int64_t j0, int64_t j1) {
    for (int64_t bt = 0; bt < B * T; ++bt) {
      const float* dy = dout + bt * C;
      float* tok = dwte + static_cast<int64_t>(tokens[bt]) * C;
      float* pos = dwpe + (bt % T) * C;
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) {
        tok[j] += dy[j];
        pos[j] += dy[j];
      }
    }
  });
}

}  // namespace mt::kernels
