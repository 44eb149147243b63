// The sums over ranks of an optimizer step besides ZeRO's data-parallel exchanges (parallel/zero_sync.h):
// gradients that model-parallel ranks compute in parts, the gradient norm's partial sums and the step's loss.
// Each adds the ranks' parts in rank order (dist/local_sum.h), so runs repeat bitwise.
#pragma once

#include <cstdint>

#include "memory/allocation.h"
#include "memory/plan.h"
#include "model/model.h"
#include "parallel/parallel_groups.h"
#include "parallel/zero_sync.h"

namespace mt {

// Pipeline parallel with a tied head: the embedding's gradient, which the first and last stage each hold a
// copy of, summed over the two so that the copies stay equal; nothing on the other stages.
void sum_tied_embedding_grads(ParallelGroups& groups, Allocation& memory, const ModelGraph& model);

// Sequence parallel: the gradients each tensor-parallel rank computes over its own tokens only (the norms':
// TensorDesc::grad_summed_over_tp), summed over the tensor group in the part of them this rank holds.
void sum_sequence_parallel_grads(ParallelGroups& groups, Allocation& memory, const ModelGraph& model);

// The gradient norm's sum of squares over every shard from this rank's `local` part: the data-parallel
// ranks' ranges when ZeRO shards the optimizer, the tensor-parallel ranks' parts, the pipeline's stages.
double sum_norm_over_shards(ParallelGroups& groups, ZeroSync& sync, const Plan& plan, double local);

// The step's mean loss from this rank's part of it (its targets' losses over the step's counted targets):
// summed over the data-parallel ranks, then the pipeline's stages (the last stage's).
double step_loss(ParallelGroups& groups, ZeroSync& sync, double local);

}  // namespace mt
