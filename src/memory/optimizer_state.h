// The optimizer state of this rank's shard [shard_begin, shard_end) of the flat parameters: fp32 master
// weights (when the policy has them) and Adam moments m, v. It is held in memory or offloaded to a file
// (memory/offloaded_state.h); either way code reaches it through windows of consecutive flat parameters, so
// the optimizer step, initialisation, loading and saving are the same code for both.
#pragma once

#include <cstdint>
#include <functional>

#include "memory/plan.h"

namespace mt {

// Element 0 of each pointer stands for flat parameter `begin`. Blocked moments: in a visit that touches the
// moments, `begin` starts a block, whose scale is m_scales[0] (v_scales[0]).
struct StateWindow {
  int64_t begin = 0, end = 0;
  float* master = nullptr;    // null without master weights
  void* m = nullptr;          // moments in the policy's dtype
  void* v = nullptr;          // Adam-mini (ModelStatePolicy::v_blocks): its fp32 blocks, all of them
  float* m_scales = nullptr;  // null without blocked moments
  float* v_scales = nullptr;
};

// The buffers of a state held in memory (the whole shard, or one chunk slot), element 0 first.
struct StateBuffers {
  float* master = nullptr;  // null without master weights
  void* m = nullptr;
  void* v = nullptr;
  float* m_scales = nullptr;  // null without blocked moments
  float* v_scales = nullptr;

  // The window [begin, end) whose element 0 is element `local` of the buffers (a block's start).
  StateWindow window(const ModelStatePolicy& policy, int64_t local, int64_t begin, int64_t end) const;
};

// What a visit touches. An offloaded state reads only what the visit reads and writes back only what it
// writes.
enum class StateAccess {
  read_master,   // saving, rounding into the weights
  write_master,  // initialisation, loading: every master value of the range is overwritten
  update,        // the optimizer step: master weights and moments read and written
  read_all,      // saving a checkpoint: master weights and moments read, nothing written back
  write_all,     // loading a checkpoint: master weights and moments overwritten, nothing read
};

class OptimizerState {
 public:
  using Visitor = std::function<void(const StateWindow&)>;
  virtual ~OptimizerState() = default;
  // Calls visit for consecutive windows covering [begin, end), which must lie in the plan's shard.
  virtual void visit(int64_t begin, int64_t end, StateAccess access, const Visitor& visit) = 0;
  // Adam-mini's second moments (ModelStatePolicy::v_blocks fp32), one model's whole on every rank and never
  // offloaded; null for AdamW.
  virtual float* adam_mini_v() const { return nullptr; }
};

// The whole shard in memory: one window over `shard`'s buffers.
class InMemoryOptimizerState : public OptimizerState {
 public:
  InMemoryOptimizerState(const Plan& plan, const StateBuffers& shard) : plan_(plan), shard_(shard) {}
  void visit(int64_t begin, int64_t end, StateAccess access, const Visitor& visit) override;
  float* adam_mini_v() const override {
    return plan_.policy.v_blocks > 0 ? static_cast<float*>(shard_.v) : nullptr;
  }

 private:
  const Plan& plan_;
  StateBuffers shard_;
};

// Checks that [begin, end) lies in the plan's shard and, when `access` touches blocked moments, starts on a
// block (a bug otherwise, not bad input).
void check_in_shard(const Plan& plan, int64_t begin, int64_t end, StateAccess access);

}  // namespace mt
