#include "train/parallel_groups.h"

#include <vector>

#include "train/train_flags.h"

namespace mt {

ParallelRank parallel_rank(const TrainConfig& config, int world, int rank) {
  const int dp = data_parallel_size(config, world), tp = config.tensor_parallel;
  return {.tp = tp, .dp = dp, .tp_rank = rank % tp, .dp_rank = rank / tp};
}

int64_t parallel_buffer_bytes(const ParallelRank& place) {
  const int64_t world = mpi_buffer_bytes(place.tp * place.dp);
  return place.tp == 1 ? world : world + mpi_buffer_bytes(place.tp) + mpi_buffer_bytes(place.dp);
}

double sum_over_ranks(Communicator& comm, double local) {
  std::vector<double> all(static_cast<size_t>(comm.size()));
  comm.all_gather(&local, all.data(), 1, DType::f64);
  double total = 0;
  for (double x : all) total += x;
  return total;
}

ParallelGroups::ParallelGroups(const TrainConfig& config, AsyncCommunicator& world)
    : world_(world), place_(parallel_rank(config, world.size(), world.rank())) {
  if (place_.tp == 1) return;
  // Every rank splits in the same order: the tensor groups (one per data-parallel rank), then the data
  // groups.
  tensor_ = world.split(place_.dp_rank, place_.tp_rank);
  data_ = world.split(place_.tp_rank, place_.dp_rank);
}

int64_t ParallelGroups::buffer_bytes() const {
  int64_t bytes = world_.buffer_bytes();
  for (const auto* group : {tensor_.get(), data_.get()})
    if (group) bytes += group->buffer_bytes();
  return bytes;
}

}  // namespace mt
