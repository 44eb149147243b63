// Causal multi-head self-attention that never stores the B*H*T*T score tensor: forward keeps one
// log-sum-exp per query row, backward recomputes the scores from Q, K and that statistic (flash-attention
// style). fp32 runs one query row at a time; bf16 and f16 run blocks of queries as matrix products
// (attention_16bit.h), with bf16 probabilities and score gradients rounded to bf16 for the products.
//
// Grouped-query attention: NH query heads share NKV key/value heads (NKV divides NH), query head h reading
// key/value head h / (NH / NKV); NKV = NH is ordinary multi-head attention.
//
// Layouts: qkv[B,T,C+2*KV] (C = NH*hs, KV = NKV*hs) with q in columns [0,C), k in [C,C+KV), v in
// [C+KV,C+2*KV), head h at columns h*hs..(h+1)*hs of its part; out[B,T,C] with heads side by side;
// lse[B,NH,T]. Scores are scaled by 1/sqrt(hs).
//
// Packed sequences (several records in one row) pass positions[B,T]: token t's position in its record, so
// that it attends only to keys [t - positions[t], t], its own record's; null: each row is one record.
#pragma once

#include <cstdint>

#include "core/half.h"
#include "exec/op_shapes.h"

namespace mt::kernels {

// Floats of scratch the kernels need for `threads` OpenMP threads. Per thread, fp32 storage takes a
// probability row and a score-gradient row (2*T); 16-bit storage (`dtype` of qkv/out) takes one (batch, head)
// as product operands, fp32 dK and dV sums and a staging area (about 5*T*head_size), plus a block of 64
// queries' scores, score gradients and their operands (about 4*64*T). The kernels index the scratch by
// omp_get_thread_num(), so they assume their parallel regions get at most `threads` threads: size it with
// omp_get_max_threads() after the one omp_set_num_threads() call at start, and resize it if the thread
// count ever changes.
int64_t attention_scratch_floats(int64_t T, int64_t head_size, int threads, DType dtype);

// T is the storage type (float, bf16 or f16); products accumulate in fp32, and softmax and lse are fp32.
template <typename T>
void attention_forward(T* out, float* lse, const T* qkv, const int32_t* positions, int64_t B, int64_t T_len,
                       int64_t C, int64_t NH, int64_t NKV, float* scratch);

// dqkv is overwritten. Each (batch, key/value head) is one task that runs its query heads and queries in a
// fixed order: the result does not depend on the thread count.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse,
                        const int32_t* positions, int64_t B, int64_t T_len, int64_t C, int64_t NH,
                        int64_t NKV, float* scratch);

// The first key query t of row `row_start` (index b * T) attends to.
inline int64_t first_key(const int32_t* positions, int64_t row_start, int64_t t) {
  return positions ? t - positions[row_start + t] : 0;
}

}  // namespace mt::kernels
