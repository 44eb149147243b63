// LayerNorm: rows are independent in forward; backward computes the input gradient row by row and the
// parameter gradients column block by column block, so their sums run over rows in a fixed order.
#include "kernels/layernorm.h"

#include <cmath>

#include "kernels/column_blocks.h"

namespace mt::kernels {

template <>
void layernorm_forward<float>(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                              const float* bias, int64_t N, int64_t C, float eps) {
#pragma omp parallel for
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    float* y = out + i * C;
    float sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < C; ++j) sum += x[j];
    const float m = sum / C;
    // Two passes: the variance of centered values does not cancel when the mean is large.
    float sq = 0;
#pragma omp simd reduction(+ : sq)
    for (int64_t j = 0; j < C; ++j) sq += (x[j] - m) * (x[j] - m);
    const float s = 1.0f / std::sqrt(sq / C + eps);
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) y[j] = (x[j] - m) * s * weight[j] + bias[j];
    mean[i] = m;
    rstd[i] = s;
  }
}

template <>
void layernorm_backward<float, float>(float* dinp, float* dweight, float* dbias, const float* dout,
                                      const float* inp, const float* weight, const float* mean,
                                      const float* rstd, int64_t N, int64_t C) {
#pragma omp parallel for
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    const float* dy = dout + i * C;
    float* dx = dinp + i * C;
    const float m = mean[i], s = rstd[i];
    // dx = s * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), with dnorm = dy * weight.
    float dnorm_sum = 0, dnorm_norm_sum = 0;
#pragma omp simd reduction(+ : dnorm_sum, dnorm_norm_sum)
    for (int64_t j = 0; j < C; ++j) {
      const float dnorm = dy[j] * weight[j];
      dnorm_sum += dnorm;
      dnorm_norm_sum += dnorm * (x[j] - m) * s;
    }
    const float dnorm_mean = dnorm_sum / C, dnorm_norm_mean = dnorm_norm_sum / C;
#pragma omp simd
    for (int64_t j = 0; j < C; ++j) {
      const float norm = (x[j] - m) * s;
      dx[j] += s * (dy[j] * weight[j] - dnorm_mean - norm * dnorm_norm_mean);
    }
  }
  parallel_over_column_blocks(C, [&](int64_t j0, int64_t j1) {
    float dw[kColumnBlock] = {}, db[kColumnBlock] = {};
    for (int64_t i = 0; i < N; ++i) {
      const float* x = inp + i * C;
      const float* dy = dout + i * C;
      const float m = mean[i], s = rstd[i];
#pragma omp simd
      for (int64_t j = j0; j < j1; ++j) {
        dw[j - j0] += dy[j] * (x[j] - m) * s;
        db[j - j0] += dy[j];
      }
    }
    for (int64_t j = j0; j < j1; ++j) {
      dweight[j] += dw[j - j0];
      dbias[j] += db[j - j0];
    }
  });
}

}  // namespace mt::kernels
