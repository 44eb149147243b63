#include "memory/optimizer_state.h"

#include <stdexcept>
#include <string>

namespace mt {

void check_in_shard(const Plan& plan, int64_t begin, int64_t end) {
  if (begin < plan.shard_begin || end > plan.shard_end)
    throw std::logic_error("optimizer state: range [" + std::to_string(begin) + ", " + std::to_string(end) +
                           ") outside the shard [" + std::to_string(plan.shard_begin) + ", " +
                           std::to_string(plan.shard_end) + ")");
}

void InMemoryOptimizerState::visit(int64_t begin, int64_t end, StateAccess, const Visitor& visit) {
  check_in_shard(plan_, begin, end);
  if (begin >= end) return;
  const int64_t local = begin - plan_.shard_begin;
  const int64_t moment_bytes = local * static_cast<int64_t>(dtype_size(plan_.policy.moments));
  visit({begin, end, master_ ? master_ + local : nullptr, m_ + moment_bytes, v_ + moment_bytes});
}

}  // namespace mt
