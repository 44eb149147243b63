#include "parallel/gradient_sums.h"

#include <algorithm>

namespace mt {

void sum_tied_embedding_grads(ParallelGroups& groups, Allocation& memory, const ModelGraph& model) {
  Communicator* group = groups.embedding();
  if (!group) return;
  const int id = model.tied_embedding;
  group->all_reduce_sum(memory.grads_at(memory.param_offset(id)), model.graph.table[id].numel(),
                        memory.plan().policy.grads);
}

void sum_sequence_parallel_grads(ParallelGroups& groups, Allocation& memory, const ModelGraph& model) {
  Communicator* group = groups.tensor();
  if (!group) return;
  const Plan& plan = memory.plan();
  const int64_t held_begin = plan.grads_begin(), held_end = plan.grads_end();
  for (int id : model.params) {
    const TensorDesc& t = model.graph.table[id];
    if (!t.grad_summed_over_tp) continue;
    // The part of the gradient this rank holds (its ZeRO-2/3 shard); the tensor group's ranks hold the same.
    const int64_t offset = memory.param_offset(id);
    const int64_t first = std::max(offset, held_begin), last = std::min(offset + t.numel(), held_end);
    if (first >= last) continue;
    group->all_reduce_sum(memory.grads_at(first), last - first, plan.policy.grads);
  }
}

double sum_norm_over_shards(ParallelGroups& groups, ZeroSync& sync, const Plan& plan, double local) {
  double sum = plan.sharding.shards_optimizer() ? sync.sum(local) : local;
  for (AsyncCommunicator* group : {groups.tensor(), groups.pipeline()})
    if (group) sum = sum_over_ranks(*group, sum);
  return sum;
}

double step_loss(ParallelGroups& groups, ZeroSync& sync, double local) {
  const double loss = groups.place().dp > 1 ? sync.sum(local) : local;
  return groups.pipeline() ? sum_over_ranks(*groups.pipeline(), loss) : loss;
}

}  // namespace mt
