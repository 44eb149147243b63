#include "parallel/parallel_groups.h"

#include <vector>

#include "config/check_config.h"
#include "model/spec.h"

namespace mt {

ParallelRank parallel_rank(const TrainConfig& config, int world, int rank) {
  const int dp = data_parallel_size(config, world), tp = config.tensor_parallel,
            pp = config.pipeline_parallel;
  ParallelRank place{.tp = tp,
                     .dp = dp,
                     .pp = pp,
                     .tp_rank = rank % tp,
                     .dp_rank = rank / tp % dp,
                     .pp_rank = rank / (tp * dp)};
  place.tied_embedding = pp > 1 && resolve_model(config.model, config.pad_vocab_multiple).tied_head;
  return place;
}

int64_t parallel_buffer_bytes(const ParallelRank& place) {
  int64_t bytes = mpi_buffer_bytes(place.world());
  if (place.tp * place.pp == 1) return bytes;
  for (int group : {place.tp, place.dp, place.pp}) bytes += mpi_buffer_bytes(group);
  return place.holds_tied_embedding() ? bytes + mpi_buffer_bytes(2) : bytes;
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
  const ParallelRank& p = place_;
  if (p.tp * p.pp == 1) return;
  // Every rank splits in the same order: the tensor groups (one per data-parallel rank and stage), the data
  // groups (one per tensor-parallel rank and stage), the pipelines (one per tensor- and data-parallel rank).
  tensor_ = world.split(p.pp_rank * p.dp + p.dp_rank, p.tp_rank);
  data_ = world.split(p.pp_rank * p.tp + p.tp_rank, p.dp_rank);
  const int pipeline_id = p.dp_rank * p.tp + p.tp_rank;
  pipeline_ = world.split(pipeline_id, p.pp_rank);
  if (p.tp == 1) tensor_.reset();
  if (p.pp == 1) pipeline_.reset();
  if (!p.tied_embedding) return;
  // The stages that do not hold the embedding each get a group of one, and drop it.
  std::unique_ptr<AsyncCommunicator> embedding =
      world.split(p.holds_tied_embedding() ? pipeline_id : p.world() + world.rank(), p.pp_rank);
  if (p.holds_tied_embedding()) embedding_ = std::move(embedding);
}

int64_t ParallelGroups::buffer_bytes() const {
  int64_t bytes = world_.buffer_bytes();
  for (const auto* group : {tensor_.get(), data_.get(), pipeline_.get(), embedding_.get()})
    if (group) bytes += group->buffer_bytes();
  return bytes;
}

double ParallelGroups::take_model_parallel_blocked_seconds() {
  double seconds = 0;
  for (AsyncCommunicator* group : {tensor_.get(), pipeline_.get(), embedding_.get()})
    if (group) seconds += group->take_blocked_seconds();
  return seconds;
}

}  // namespace mt
