// Softmax + cross-entropy fused: the probabilities are never stored beside the logits. The gradient
// overwrites the logits in place, so a V-wide tensor exists once.
#pragma once

#include <cstdint>
#include <functional>

namespace mt::kernels {

// logits[N,Vp]: each row's first V columns are real, columns [V,Vp) are vocabulary padding that never wins.
// Writes losses[N] = -log softmax(row)[target]. With compute_grad, each row is overwritten by
// grad_scale * (softmax(row) - onehot(target)), with zeros in the padded columns. A row whose loss_mask is 0
// (loss_mask null: every row counts) has loss 0 and a zero gradient.
void softmax_cross_entropy(float* logits, float* losses, const int32_t* targets, const uint8_t* loss_mask,
                           int64_t N, int64_t V, int64_t Vp, bool compute_grad, float grad_scale);

// The vocabulary split over tensor-parallel ranks (Megatron's vocabulary-parallel cross-entropy): this
// rank's logits are the columns [begin, begin + Vp) of the whole, of which the first V are real. `stats`
// holds [ranks][3][N] floats: the kernel writes this rank's row maxima, sums of exponentials (from that
// maximum) and target logits (0 where another rank holds the target), then `gather` fills the other
// ranks' blocks; each row's softmax then combines them in rank order, so every rank gets the same loss.
struct VocabSplit {
  int64_t begin = 0;
  int ranks = 1, rank = 0;
  float* stats = nullptr;
  std::function<void(float* stats, int64_t floats_per_rank)> gather;
};

// As softmax_cross_entropy, over this rank's columns of a split vocabulary; gradients in this rank's columns.
void softmax_cross_entropy_split(float* logits, float* losses, const int32_t* targets,
                                 const uint8_t* loss_mask, int64_t N, int64_t V, int64_t Vp,
                                 bool compute_grad, float grad_scale, const VocabSplit& split);

}  // namespace mt::kernels
