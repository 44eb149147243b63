// The CUDA kernels of the token embedding plus a learned position embedding (GPT-2; LLaMA has none: null
// wpe), with the operands of src/backend/cpu/embedding.h and the launch's stream last (so `vocab` has no
// default here).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/half.h"
#include "exec/op_shapes.h"

namespace mt::cuda {

// Writes out[B,T,C] = wte[tokens[b,t] - vocab.begin] + wpe[p], p = positions[b,t] or, positions null, t. A
// token outside the rows `vocab` holds contributes zeros. T is float, bf16 or f16.
template <typename T>
void embedding_forward(T* out, const int32_t* tokens, const int32_t* positions, const T* wte, const T* wpe,
                       int64_t B, int64_t T_len, int64_t C, VocabRows vocab, cudaStream_t stream);

// Accumulates dwte[tokens[b,t] - vocab.begin] += dout[b,t] (tokens `vocab` holds) and dwpe[p] += dout[b,t]
// (either may be null). Each gradient row is summed in fp32 from its stored value in (b,t) order and
// stored once (rounded to G, float or bf16): the CPU's sums, deterministic and without atomics.
template <typename T, typename G>
void embedding_backward(G* dwte, G* dwpe, const T* dout, const int32_t* tokens, const int32_t* positions,
                        int64_t B, int64_t T_len, int64_t C, VocabRows vocab, cudaStream_t stream);

}  // namespace mt::cuda
