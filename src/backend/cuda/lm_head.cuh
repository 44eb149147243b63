// The LM head with its loss over one chunk of rows on the GPU, the CUDA mirror of backend/cpu/lm_head.h (and
// of cross_entropy.h's whole-vocabulary softmax cross-entropy): logits = x @ wte^T in fp32 through cuBLASLt,
// one block per row for the loss and, in training, the gradient in place (rounded into dlogits for 16-bit
// T), then dx = dlogits @ wte and dwte += dlogits^T @ x. One GPU only: no split vocabulary.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cpu/lm_head.h"  // LmHeadChunk: the same operands on both backends
#include "core/half.h"

namespace mt::cuda {

using kernels::LmHeadChunk;

// As kernels::lm_head_loss_chunk, with device pointers; c.matmul_scratch is ignored (the products take the
// cuBLASLt workspace). std::logic_error when c.split is set: tensor parallelism does not run on the GPU.
template <typename T, typename G>
void lm_head_loss_chunk(cublasLtHandle_t lt, const LmHeadChunk<T, G>& c, float* workspace,
                        int64_t workspace_bytes, cudaStream_t stream);

// out[N, Vp] (fp32) = x[N, C] @ wte[Vp, C]^T: the whole logits, for Backend::logits.
template <typename T>
void logits(cublasLtHandle_t lt, float* out, const T* x, const T* wte, int64_t N, int64_t C, int64_t Vp,
            float* workspace, int64_t workspace_bytes, cudaStream_t stream);

}  // namespace mt::cuda
