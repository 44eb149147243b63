// The optimizer step over every parameter tensor: overflow check, unscaling, global-norm clipping, then AdamW
// with weight decay only on the tensors the model says decay. Works for every model-state layout of the
// Plan's policy (fp32; 16-bit weights with fp32 master; O2 bf16 moments and gradients; no master weights;
// 8-bit block-quantized moments), and Adam-mini's step (one fp32 second moment per block; --optimizer).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/adamw_step.h"
#include "memory/allocation.h"
#include "memory/tensor_table.h"

namespace mt {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
  float clip_grad = 1.0f;           // global gradient norm limit; 0 turns clipping off
  bool stochastic_moments = false;  // bf16 moments rounded stochastically (--o2-stochastic-rounding)
  uint64_t seed = 0;                // stochastic rounding's seed (the run's)
};

struct ParamGroup {
  int id;               // parameter tensor
  bool decay;           // gets weight decay
  bool in_norm = true;  // counts in this rank's part of the gradient norm (a replicated copy counts once)
};

struct OptimizerStepResult {
  double grad_norm = 0;  // of the unscaled gradients, before clipping; inf or NaN on overflow
  bool skipped = false;  // overflow: nothing was updated
};

class AdamW {
 public:
  // With `mini_blocks` (one per parameter of `params`, the plan's ModelStatePolicy::v_blocks in all) the
  // step is Adam-mini's: one second moment per block.
  AdamW(const AdamWConfig& config, std::vector<ParamGroup> params, std::vector<MiniBlocks> mini_blocks = {})
      : config_(config), params_(std::move(params)), mini_blocks_(std::move(mini_blocks)) {}

  // Sums a rank's partial sum of squares over all data-parallel ranks (identity for one process).
  using GlobalSum = std::function<double(double)>;
  // Sums n values in place over all data-parallel ranks, in rank order: Adam-mini's per-block sums of
  // squares where each rank holds its shard of the gradients (ZeRO-2, 3).
  using GlobalSums = std::function<void(double* values, int64_t n)>;

  // The gradients hold loss_scale times the true ones. On inf/NaN nothing changes and the step is skipped;
  // otherwise the plan's shard of weights and moments is updated and the number of updates taken grows by
  // one. Under ZeRO the caller has reduced this rank's gradient range before, and gathers the weights after.
  OptimizerStepResult step(
      Allocation& memory, float lr, float loss_scale,
      const GlobalSum& global_sum = [](double local) { return local; },
      const GlobalSums& global_sums = [](double*, int64_t) {});
  // What the gradients are multiplied by in an update: the loss scale undone, and clipped to clip_grad when
  // their norm (unscaled) is above it.
  float grad_multiplier(double norm, float loss_scale) const;
  // --optimizer-in-backward: the step begins, counting one update, and then each flat range [begin, end) is
  // updated from its gradients at `grads` (element `begin`) times `grad_multiplier` as soon as the backward
  // has completed them; the same per-element arithmetic as step's.
  void begin_step() { ++updates_; }
  void update_range(Allocation& memory, float lr, float grad_multiplier, int64_t begin, int64_t end,
                    const void* grads);
  // Adam-mini: the second moments of the whole tensors in [begin, end) from their gradients at `grads`
  // (element `begin`), a pass before update_range's over any part of them (a block of the model complete in
  // the backward; in step, every tensor, then this rank's shard). Nothing for AdamW.
  void update_second_moments(Allocation& memory, float grad_multiplier, int64_t begin, int64_t end,
                             const void* grads);
  int64_t updates_taken() const { return updates_; }
  // A checkpoint's count (it seeds the bias corrections and the stochastic rounding of the next update).
  void restore_updates_taken(int64_t updates) { updates_ = updates; }

 private:
  // The flat gradients [begin, end) that an update reads, element `begin` at `data`, in the policy's dtype.
  struct Gradients {
    int64_t begin = 0, end = 0;
    const void* data = nullptr;
  };
  // The update of [grads.begin, grads.end) in the policy's kind: one of the four below (Adam-mini's with its
  // second moments already this step's).
  void apply(Allocation& memory, float lr, float grad_multiplier, const Gradients& grads);
  // Through the device (memory/device.h): moments in fp32 or bf16, or blocked in 8 bits.
  void update(Allocation& memory, float lr, float grad_multiplier, const Gradients& grads);
  void update_blocked(Allocation& memory, float lr, float grad_multiplier, const Gradients& grads);
  void update_mini(Allocation& memory, float lr, float grad_multiplier, const Gradients& grads);
  void update_mini_blocked(Allocation& memory, float lr, float grad_multiplier, const Gradients& grads);
  // std::logic_error unless mini_blocks_ are the plan's, one per parameter in order.
  void check_mini_blocks(const Plan& plan) const;
  // Adam-mini's second moments of every block where this rank holds only its shard of the gradients: the
  // shard's sums of squares per block, summed over the ranks, then v.
  void update_second_moments_from_shard(Allocation& memory, float grad_multiplier,
                                        const GlobalSums& global_sums);
  // The weights and gradients of flat parameters [first, last), with their master copy at `master`.
  AdamWOperands operands(const Allocation& memory, float* master, int64_t first, int64_t last,
                         const Gradients& grads) const;

  AdamWConfig config_;
  std::vector<ParamGroup> params_;
  std::vector<MiniBlocks> mini_blocks_;
  // The sum of squares of this rank's gradients that count in the norm.
  double local_sum_of_squares(const Allocation& memory) const;

  int64_t updates_ = 0;  // Adam's t: skipped steps do not count
};

}  // namespace mt
