#include "memory/optimizer_state.h"

#include <stdexcept>
#include <string>

namespace mt {

StateWindow StateBuffers::window(const ModelStatePolicy& policy, int64_t local, int64_t begin,
                                 int64_t end) const {
  const int64_t moment_bytes = local * static_cast<int64_t>(dtype_size(policy.moments));
  const int64_t block = policy.blocked_moments() ? local / policy.moment_block : 0;
  return {begin, end, master ? master + local : nullptr, static_cast<char*>(m) + moment_bytes,
          // Adam-mini's v is held whole (the plan allows no other window): its blocks are not per element.
          policy.v_blocks > 0 ? v : static_cast<char*>(v) + moment_bytes,
          m_scales ? m_scales + block : nullptr, v_scales ? v_scales + block : nullptr};
}

void check_in_shard(const Plan& plan, int64_t begin, int64_t end, StateAccess access) {
  if (begin < plan.shard_begin || end > plan.shard_end)
    throw std::logic_error("optimizer state: range [" + std::to_string(begin) + ", " + std::to_string(end) +
                           ") outside the shard [" + std::to_string(plan.shard_begin) + ", " +
                           std::to_string(plan.shard_end) + ")");
  const bool moments = access != StateAccess::read_master && access != StateAccess::write_master;
  if (moments && plan.policy.blocked_moments() && begin < end && begin % plan.policy.moment_block != 0)
    throw std::logic_error("optimizer state: range [" + std::to_string(begin) + ", " + std::to_string(end) +
                           ") does not start on a block of " + std::to_string(plan.policy.moment_block));
}

void InMemoryOptimizerState::visit(int64_t begin, int64_t end, StateAccess access, const Visitor& visit) {
  check_in_shard(plan_, begin, end, access);
  if (begin >= end) return;
  visit(shard_.window(plan_.policy, begin - plan_.shard_begin, begin, end));
}

}  // namespace mt
