#include "model/model_states.h"

#include <stdexcept>

#include "backend/cpu/convert.h"

namespace mt {

namespace {

template <typename T>
void round_into(const Allocation& memory, OptimizerState& state, int64_t begin, int64_t end) {
  state.visit(begin, end, StateAccess::read_master, [&](const StateWindow& w) {
    kernels::convert(memory.weights_from<T>(w.begin), w.master, w.end - w.begin);
  });
}

}  // namespace

void round_master_into_weights(const Allocation& memory) {
  const Plan& plan = memory.plan();
  if (!plan.policy.master_weights) return;
  OptimizerState& state = memory.optimizer_state();
  switch (plan.policy.weights) {
    case DType::bf16:
      round_into<bf16>(memory, state, plan.shard_begin, plan.shard_end);
      return;
    case DType::f16:
      round_into<f16>(memory, state, plan.shard_begin, plan.shard_end);
      return;
    default:
      throw std::logic_error("master weights exist only for 16-bit weights");
  }
}

}  // namespace mt
