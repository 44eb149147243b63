// Times the communicator's collectives on one buffer size, per dtype:
//   mpirun --allow-run-as-root --oversubscribe -np 2 build/bench/bench_collectives [MiB] [iterations]
// Prints, from rank 0, the median time of each collective and its bus bandwidth (bytes each rank sends and
// receives: 2(N-1)/N of the buffer for an all-reduce, (N-1)/N for the others).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "core/dtype.h"
#include "dist/communicator.h"

namespace {

double median_ms(mt::Communicator& comm, int iterations, const std::function<void()>& op) {
  std::vector<double> ms;
  op();  // warm-up: first touch of the buffers and of MPI's connections
  for (int i = 0; i < iterations; ++i) {
    comm.barrier();
    const auto start = std::chrono::steady_clock::now();
    op();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t bytes = (argc > 1 ? std::atoll(argv[1]) : 16) << 20;
  const int iterations = argc > 2 ? std::atoi(argv[2]) : 20;
  const auto comm = mt::make_communicator(mt::DistBackend::automatic);
  const int n = comm->size();
  if (comm->rank() == 0) {
    std::printf("%s, %d ranks, %.0f MiB buffers, communicator buffer %.1f MiB, median of %d\n",
                comm->backend().c_str(), n, bytes / 1048576.0, comm->buffer_bytes() / 1048576.0, iterations);
  }
  for (mt::DType dtype : {mt::DType::f32, mt::DType::bf16}) {
    const int64_t count = bytes / static_cast<int64_t>(mt::dtype_size(dtype));
    const int64_t shard = count / n;
    std::vector<char> data(static_cast<std::size_t>(bytes)), other(static_cast<std::size_t>(bytes));
    const struct {
      const char* name;
      double traffic;  // bus bytes per buffer byte
      std::function<void()> op;
    } ops[] = {
        {"all_reduce_sum", 2.0 * (n - 1) / n, [&] { comm->all_reduce_sum(data.data(), count, dtype); }},
        {"reduce_scatter_sum", 1.0 * (n - 1) / n,
         [&] { comm->reduce_scatter_sum(data.data(), other.data(), shard, dtype); }},
        {"all_gather", 1.0 * (n - 1) / n, [&] { comm->all_gather(other.data(), data.data(), shard, dtype); }},
    };
    for (const auto& op : ops) {
      const double ms = median_ms(*comm, iterations, op.op);
      if (comm->rank() == 0) {
        std::printf("  %-4s %-18s %8.2f ms  %6.2f GB/s bus\n", mt::dtype_name(dtype).data(), op.name, ms,
                    op.traffic * static_cast<double>(bytes) / ms / 1e6);
      }
    }
  }
  return 0;
}
