// Causal multi-head self-attention that never stores the B*H*T*T score tensor: forward keeps one
// log-sum-exp per query row, backward recomputes the scores from Q, K and that statistic (flash-attention
// style). fp32 runs one query row at a time; bf16 and f16 run blocks of queries as matrix products
// (attention_16bit.h), with bf16 probabilities and score gradients rounded to bf16 for the products.
//
// Layouts: qkv[B,T,3C] with q in columns [0,C), k in [C,2C), v in [2C,3C), head h at columns h*hs..(h+1)*hs
// of each part (hs = C/NH); out[B,T,C] with heads side by side; lse[B,NH,T]. Scores are scaled by 1/sqrt(hs).
#pragma once

#include <cstdint>

#include "core/half.h"

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
void attention_forward(T* out, float* lse, const T* qkv, int64_t B, int64_t T_len, int64_t C, int64_t NH,
                       float* scratch);

// dqkv[B,T,3C] is overwritten. Each (batch, head) is reduced in a fixed order: the result does not depend on
// the thread count.
template <typename T>
void attention_backward(T* dqkv, const T* dout, const T* qkv, const T* out, const float* lse, int64_t B,
                        int64_t T_len, int64_t C, int64_t NH, float* scratch);

}  // namespace mt::kernels
