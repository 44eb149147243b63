// Causal grouped-query self-attention on the GPU, the CUDA side of backend/cpu/attention.h (same layouts,
// same contracts): flash style, so no B*H*T*T score tensor is ever stored; the forward keeps one
// log-sum-exp per query row and the backward recomputes the probabilities from Q, K and that statistic.
//
// Layouts (as the CPU's): qkv[B,T,C+2*KV] (C = NH*hs, KV = NKV*hs) with q in columns [0,C), k in
// [C,C+KV), v in [C+KV,C+2*KV), head h at columns h*hs..(h+1)*hs of its part, query head h reading
// key/value head h / (NH / NKV); out[B,T,C]; lse[B,NH,T], natural log of the sum of exp of the scores
// scaled by 1/sqrt(hs). positions[B,T] (null: one record per row): query t attends to keys
// [t - positions[t], t] of its row. hs = C / NH must be at most 128.
//
// The GPU kernels need no scratch: `scratch` may be null (the plan gives this op 0 floats) and is unused.
// All pointers are device pointers; the kernels run on `stream`, in order, and never synchronise.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/half.h"

namespace mt::cuda {

// T is the storage type (float, bf16 or f16); products accumulate in fp32, softmax and lse are fp32.
template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, const int32_t* positions, int64_t B, int64_t T_len,
                       int64_t C, int64_t NH, int64_t NKV, float* scratch, cudaStream_t stream);

// dqkv is overwritten (every column of every row). Deterministic without atomics: dK and dV of a key tile
// sum over the group's query heads and the query tiles in a fixed order inside one block; dQ of a query
// tile sums over the key tiles in order inside another.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
                        const int32_t* positions, int64_t B, int64_t T_len, int64_t C, int64_t NH,
                        int64_t NKV, float* scratch, cudaStream_t stream);

}  // namespace mt::cuda
