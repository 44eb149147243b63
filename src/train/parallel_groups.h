// The world's ranks in Megatron's layout and the communicators of their groups: tensor-parallel ranks are
// adjacent (world rank = data-parallel rank x tp + tensor-parallel rank), so a tensor-parallel group shares
// a machine first; the data-parallel group is the ranks holding the same part of the model.
#pragma once

#include <cstdint>
#include <memory>

#include "dist/async_communicator.h"
#include "train/train_config.h"

namespace mt {

struct ParallelRank {
  int tp = 1, dp = 1;  // --tensor-model-parallel-size, and the data-parallel ranks beside it
  int tp_rank = 0, dp_rank = 0;
};

// Rank `rank` of `world` (a usage error when --tensor-model-parallel-size does not divide it).
ParallelRank parallel_rank(const TrainConfig& config, int world, int rank);

// The MPI receive buffers of the world's communicator and its groups' (dist/communicator.h), known before
// launch: what the plan's comm category counts for them.
int64_t parallel_buffer_bytes(const ParallelRank& place);

// The sum over comm's ranks of each one's `local`, added in rank order: the same bits on every rank.
double sum_over_ranks(Communicator& comm, double local);

class ParallelGroups {
 public:
  // Collective over the world: splits it into the groups (none without tensor parallelism). The world must
  // outlive this.
  ParallelGroups(const TrainConfig& config, AsyncCommunicator& world);

  const ParallelRank& place() const { return place_; }
  AsyncCommunicator& world() { return world_; }
  // The ranks that hold the same part of the model: the world itself without tensor parallelism.
  AsyncCommunicator& data() { return data_ ? *data_ : world_; }
  // The ranks that split each op; null without tensor parallelism.
  AsyncCommunicator* tensor() { return tensor_.get(); }
  // The receive buffers of every communicator above (parallel_buffer_bytes, as allocated).
  int64_t buffer_bytes() const;

 private:
  AsyncCommunicator& world_;
  ParallelRank place_;
  std::unique_ptr<AsyncCommunicator> tensor_, data_;
};

}  // namespace mt
