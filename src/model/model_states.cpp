#include "model/model_states.h"

#include <stdexcept>

namespace mt {

void round_master_into_weights(const Allocation& memory) {
  const Plan& plan = memory.plan();
  if (!plan.policy.master_weights) return;
  if (plan.policy.weights != DType::bf16 && plan.policy.weights != DType::f16)
    throw std::logic_error("master weights exist only for 16-bit weights");
  memory.optimizer_state().visit(plan.shard_begin, plan.shard_end, StateAccess::read_master,
                                 [&](const StateWindow& w) {
                                   memory.device().convert(memory.weights_at(w.begin), plan.policy.weights,
                                                           w.master, DType::f32, w.end - w.begin);
                                 });
}

}  // namespace mt
