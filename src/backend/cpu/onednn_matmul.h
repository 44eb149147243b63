// bf16 matrix products through oneDNN's matmul primitive (fp32 accumulation), with the primitives cached:
// creating one costs far more than running it at GPT-2's sizes.
#pragma once

#include <cstdint>

#include "core/half.h"

namespace mt::kernels {

// C[M,N] = op(A) @ op(B) + bias (+ C with accumulate), rounded once into Out (float or bf16). Row-major with
// row strides lda, ldb, ldc; bias (may be null) has N elements. Not thread-safe: one caller thread.
template <typename Out>
void onednn_matmul(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda,
                   const bf16* B, int64_t ldb, const bf16* bias, bool accumulate, Out* C, int64_t ldc);

// Primitives currently cached (for tests).
int64_t onednn_matmul_cache_size();

}  // namespace mt::kernels
