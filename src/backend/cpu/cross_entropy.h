// Softmax + cross-entropy fused: the probabilities are never stored beside the logits. The gradient
// overwrites the logits in place, so a V-wide tensor exists once.
#pragma once

#include <cstdint>

namespace mt::kernels {

// logits[N,Vp]: each row's first V columns are real, columns [V,Vp) are vocabulary padding that never wins.
// Writes losses[N] = -log softmax(row)[target]. With compute_grad, each row is overwritten by
// grad_scale * (softmax(row) - onehot(target)), with zeros in the padded columns. A row whose loss_mask is 0
// (loss_mask null: every row counts) has loss 0 and a zero gradient.
void softmax_cross_entropy(float* logits, float* losses, const int32_t* targets, const uint8_t* loss_mask,
                           int64_t N, int64_t V, int64_t Vp, bool compute_grad, float grad_scale);

}  // namespace mt::kernels
