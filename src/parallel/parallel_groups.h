// The world's ranks in Megatron's layout and the communicators of their groups: tensor-parallel ranks are
// adjacent, then data-parallel ones, then pipeline stages (world rank = (pipeline stage x dp + data-parallel
// rank) x tp + tensor-parallel rank), so a tensor-parallel group shares a machine first; the data-parallel
// group is the ranks holding the same part of the model; the pipeline group the stages of one model copy.
#pragma once

#include <cstdint>
#include <memory>

#include "config/train_config.h"
#include "dist/async_communicator.h"

namespace mt {

struct ParallelRank {
  // --tensor-model-parallel-size, the data-parallel ranks beside it, --pipeline-model-parallel-size
  int tp = 1, dp = 1, pp = 1;
  int tp_rank = 0, dp_rank = 0, pp_rank = 0;
  // Pipeline parallel with a tied LM head: the first and last stages both hold the embedding and sum its
  // gradient in a group of their own.
  bool tied_embedding = false;

  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == pp - 1; }
  bool holds_tied_embedding() const { return tied_embedding && (first_stage() || last_stage()); }
  int world() const { return tp * dp * pp; }
};

// Rank `rank` of `world` (a usage error when --tensor-model-parallel-size x --pipeline-model-parallel-size
// does not divide it).
ParallelRank parallel_rank(const TrainConfig& config, int world, int rank);

// The MPI receive buffers of the world's communicator and its groups' (dist/communicator.h), known before
// launch: what the plan's comm category counts for them.
int64_t parallel_buffer_bytes(const ParallelRank& place);

// The sum over comm's ranks of each one's `local`, added in rank order: the same bits on every rank.
double sum_over_ranks(Communicator& comm, double local);

class ParallelGroups {
 public:
  // Collective over the world: splits it into the groups (none without tensor or pipeline parallelism). The
  // world must outlive this.
  ParallelGroups(const TrainConfig& config, AsyncCommunicator& world);

  const ParallelRank& place() const { return place_; }
  AsyncCommunicator& world() { return world_; }
  // The ranks that hold the same part of the model: the world itself without model parallelism.
  AsyncCommunicator& data() { return data_ ? *data_ : world_; }
  // The ranks that split each op; null without tensor parallelism.
  AsyncCommunicator* tensor() { return tensor_.get(); }
  // The stages of this rank's model copy, ranked by stage; null without pipeline parallelism.
  AsyncCommunicator* pipeline() { return pipeline_.get(); }
  // The first and last stage, which both hold a tied embedding; null unless place().holds_tied_embedding().
  AsyncCommunicator* embedding() { return embedding_.get(); }
  // The receive buffers of every communicator above (parallel_buffer_bytes, as allocated).
  int64_t buffer_bytes() const;
  // The seconds blocked in the tensor group's, the pipeline's and the tied embedding's exchanges since the
  // last call.
  double take_model_parallel_blocked_seconds();

 private:
  AsyncCommunicator& world_;
  ParallelRank place_;
  std::unique_ptr<AsyncCommunicator> tensor_, data_, pipeline_, embedding_;
};

}  // namespace mt
