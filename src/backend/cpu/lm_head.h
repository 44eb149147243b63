// The LM head with its loss over one chunk of rows, so that the fp32 logits exist for a chunk at a time:
// logits = x @ wte^T, softmax cross-entropy against the targets, and in training the logits' gradient in
// place, rounded to T when T is 16-bit, then the input's gradient and the tied embedding's.
#pragma once

#include <cstdint>

#include "backend/cpu/cross_entropy.h"

namespace mt::kernels {

// T: activations and weights; G: the weight gradient's dtype.
template <typename T, typename G>
struct LmHeadChunk {
  const T* x;                          // [rows, C]
  const T* wte;                        // [Vp, C]
  const int32_t* targets;              // [rows]
  const uint8_t* loss_mask = nullptr;  // [rows], 1 where the loss counts the row; null: every row counts
  float* logits;           // [rows, Vp] scratch; holds the fp32 gradient after the loss in training
  T* dlogits;              // [rows, Vp] the gradient rounded to T (16-bit T only; null for float)
  float* losses;           // [rows]
  T* dx;                   // [rows, C], written (null: evaluation)
  G* dwte;                 // [Vp, C], accumulated into; null when frozen
  float* matmul_scratch;   // gemm_scratch_floats(T, isa, threads) floats, or null when that is 0
  int64_t rows, C, V, Vp;  // V real vocabulary columns of the Vp padded ones
  float grad_scale;        // the gradient of each row's loss is grad_scale * (softmax - onehot)
  // Tensor parallel: wte holds this rank's rows of a split vocabulary (V, Vp: this rank's columns); null
  // for a whole one. dx is then this rank's part of the input's gradient.
  const VocabSplit* split = nullptr;
};

template <typename T, typename G>
void lm_head_loss_chunk(const LmHeadChunk<T, G>& c);

}  // namespace mt::kernels
