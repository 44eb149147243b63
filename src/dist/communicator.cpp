#include "dist/communicator.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "core/error.h"
#include "dist/local_sum.h"
#ifdef MEMTRAIN_HAVE_MPI
#include "dist/mpi_communicator.h"
#endif

namespace mt {
namespace {

void check_root(int root, const char* operation) {
  if (root != 0)
    throw std::invalid_argument(std::string(operation) + ": root " + std::to_string(root) + " of 1 rank");
}

// One rank: sums are the data itself, gathers and scatters copy.
class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "single"; }

  void all_reduce_sum(void*, int64_t count, DType dtype) override {
    check_count(count, "all_reduce_sum");
    check_sum_dtype(dtype, "all_reduce_sum");
  }
  void reduce_scatter_sum(const void* send, void* recv, int64_t count, DType dtype) override {
    check_count(count, "reduce_scatter_sum");
    check_sum_dtype(dtype, "reduce_scatter_sum");
    copy(send, recv, count, dtype);
  }
  void reduce_sum(const void* send, void* recv, int64_t count, DType dtype, int root) override {
    check_count(count, "reduce_sum");
    check_sum_dtype(dtype, "reduce_sum");
    check_root(root, "reduce_sum");
    copy(send, recv, count, dtype);
  }
  void all_gather(const void* send, void* recv, int64_t count, DType dtype) override {
    check_count(count, "all_gather");
    copy(send, recv, count, dtype);
  }
  void broadcast(void*, int64_t count, DType, int root) override {
    check_count(count, "broadcast");
    check_root(root, "broadcast");
  }
  void send_recv(const void*, int64_t, void*, int64_t, DType, int peer) override {
    throw std::invalid_argument("send_recv: peer " + std::to_string(peer) + " of 1 rank");
  }
  void barrier() override {}
  int64_t buffer_bytes() const override { return 0; }

 protected:
  std::unique_ptr<Communicator> split_into_group(int, int) override {
    return std::make_unique<SingleCommunicator>();
  }

 private:
  static void copy(const void* from, void* to, int64_t count, DType dtype) {
    if (from != to && count > 0) std::memmove(to, from, static_cast<std::size_t>(count) * dtype_size(dtype));
  }
};

// The number of ranks the launcher started: OpenMPI's mpirun sets OMPI_COMM_WORLD_SIZE, MPICH's Hydra and
// Slurm's PMI set PMI_SIZE. 1 when neither is set.
int launched_ranks() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return 1;
}

}  // namespace

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  if (color < 0) throw std::invalid_argument("split: negative color " + std::to_string(color));
  return split_into_group(color, key);
}

int64_t mpi_buffer_bytes(int world) {
  return (world - 1) * kMpiRoundBytes;
}

DistBackend parse_dist_backend(const std::string& name) {
  return kDistBackendNames.parse_or_fail("--dist-backend", name);
}

std::unique_ptr<Communicator> make_communicator(DistBackend backend, double timeout_seconds) {
  const int ranks = launched_ranks();
  const bool want_mpi = backend == DistBackend::mpi || (backend == DistBackend::automatic && ranks > 1);
  if (!want_mpi) return std::make_unique<SingleCommunicator>();
#ifdef MEMTRAIN_HAVE_MPI
  return make_mpi_communicator(timeout_seconds);
#else
  (void)timeout_seconds;  // one process waits for no one
  if (backend == DistBackend::mpi) fail_usage("--dist-backend mpi: this memtrain was built without MPI");
  fail_usage(
      "--dist-backend auto: launched as " + std::to_string(ranks) +
      " ranks, but this memtrain was built without MPI (install libopenmpi-dev and rebuild, or run one "
      "process)");
#endif
}

}  // namespace mt
