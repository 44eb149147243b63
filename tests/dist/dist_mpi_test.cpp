// The MPI communicator, run by CTest under mpirun with 1, 2 and 3 ranks (tests/dist/CMakeLists.txt), behind
// the AsyncCommunicator the trainer puts around it, so every collective runs on its worker thread. Every
// rank computes all ranks' data itself, so it knows the exact bits each collective must give.
//
//   dist_mpi_test               every check; a failed check prints its rank and line and exits 1
//   dist_mpi_test --fail MODE   the last rank fails while the others are in a collective: exit (_exit(9)),
//                               kill (SIGKILL) or throw (an exception unwinds past the communicator)
#include <unistd.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/half.h"
#include "core/rng.h"
#include "dist/async_communicator.h"
#include "dist/communicator.h"

namespace mt {
namespace {

int g_rank = -1;

#define CHECK(cond)                                                                                         \
  do {                                                                                                      \
    if (!(cond)) {                                                                                          \
      std::fprintf(stderr, "dist_mpi_test: rank %d: line %d: check failed: %s\n", g_rank, __LINE__, #cond); \
      std::_Exit(1); /* unfinalised, so mpirun ends the job */                                              \
    }                                                                                                       \
  } while (0)

// Rank r's i-th element: random sign and mantissa, magnitude 2^-8 to 2^8, so that the order of a sum shows in
// its bits.
float value(int r, int64_t i, uint64_t salt) {
  const uint64_t bits = random_bits(salt, static_cast<uint64_t>(r), static_cast<uint64_t>(i));
  const uint32_t exponent = 127 - 8 + static_cast<uint32_t>((bits >> 32) % 17);
  return std::bit_cast<float>((static_cast<uint32_t>(bits >> 63) << 31) | (exponent << 23) |
                              static_cast<uint32_t>(bits & 0x7fffff));
}

template <typename T>
std::vector<T> rank_data(int r, int64_t n, uint64_t salt) {
  std::vector<T> data(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) data[i] = round_to<T>(value(r, i, salt));
  return data;
}

// The contract, computed independently of the library: fp32 sums in rank order, rounded once.
template <typename T>
std::vector<T> expected_sum(int ranks, int64_t n, uint64_t salt, bool reversed = false) {
  std::vector<std::vector<T>> data;
  for (int r = 0; r < ranks; ++r) data.push_back(rank_data<T>(reversed ? ranks - 1 - r : r, n, salt));
  std::vector<T> sum(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float s = to_f32(data[0][i]);
    for (int r = 1; r < ranks; ++r) s += to_f32(data[r][i]);
    sum[i] = round_to<T>(s);
  }
  return sum;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// FNV-1a over every result this rank saw, to compare ranks at the end.
uint64_t g_hash = 0xcbf29ce484222325ull;
template <typename T>
void fold(const std::vector<T>& v) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(v.data());
  for (std::size_t i = 0; i < v.size() * sizeof(T); ++i) g_hash = (g_hash ^ bytes[i]) * 0x100000001b3ull;
}

// Counts around the edges: empty, fewer elements than ranks, uneven splits, and past one round (1 MiB per
// peer, kRoundBytes in mpi_communicator.cpp): two all-reduce windows, two reduce-scatter and gather rounds.
std::vector<int64_t> counts(int ranks, DType dtype) {
  const int64_t round = (int64_t{1} << 20) / static_cast<int64_t>(dtype_size(dtype));
  return {0, 1, ranks - 1, ranks + 1, 1000, ranks * round + 5};
}

template <typename T>
void check_all_reduce(Communicator& comm, uint64_t salt) {
  for (int64_t n : counts(comm.size(), dtype_of<T>())) {
    std::vector<T> data = rank_data<T>(comm.rank(), n, salt + static_cast<uint64_t>(n));
    std::vector<T> again = data;
    comm.all_reduce_sum(data.data(), n, dtype_of<T>());
    CHECK(same_bits(data, expected_sum<T>(comm.size(), n, salt + static_cast<uint64_t>(n))));
    comm.all_reduce_sum(again.data(), n, dtype_of<T>());
    CHECK(same_bits(again, data));  // a repeated call gives the same bits
    fold(data);
  }
}

// The layout a ZeRO caller uses: a logical n padded to size() * ceil(n / size()) with zeros.
template <typename T>
void check_padded_scatter_gather(Communicator& comm, uint64_t salt) {
  const int ranks = comm.size();
  for (int64_t n : counts(ranks, dtype_of<T>())) {
    const int64_t count = (n + ranks - 1) / ranks;
    std::vector<T> send = rank_data<T>(comm.rank(), n, salt + static_cast<uint64_t>(n));
    send.resize(static_cast<std::size_t>(ranks * count), round_to<T>(0.0f));
    std::vector<T> expected = expected_sum<T>(ranks, n, salt + static_cast<uint64_t>(n));
    expected.resize(send.size(), round_to<T>(0.0f));

    std::vector<T> shard(static_cast<std::size_t>(count));
    comm.reduce_scatter_sum(send.data(), shard.data(), count, dtype_of<T>());
    const auto mine = expected.begin() + comm.rank() * count;
    CHECK(same_bits(shard, std::vector<T>(mine, mine + count)));

    std::vector<T> full(send.size());
    comm.all_gather(shard.data(), full.data(), count, dtype_of<T>());
    CHECK(same_bits(full, expected));

    // In place both ways: the shard is reduced into, and gathered from, this rank's chunk of the buffer.
    T* own = send.data() + comm.rank() * count;
    comm.reduce_scatter_sum(send.data(), own, count, dtype_of<T>());
    comm.all_gather(own, send.data(), count, dtype_of<T>());
    CHECK(same_bits(send, expected));
    fold(full);
  }
}

// Each rank in turn as the root; the others' recv stays untouched.
template <typename T>
void check_reduce(Communicator& comm, uint64_t salt) {
  for (int64_t n : counts(comm.size(), dtype_of<T>())) {
    const std::vector<T> expected = expected_sum<T>(comm.size(), n, salt + static_cast<uint64_t>(n));
    for (int root = 0; root < comm.size(); ++root) {
      const std::vector<T> send = rank_data<T>(comm.rank(), n, salt + static_cast<uint64_t>(n));
      std::vector<T> recv(static_cast<std::size_t>(n), round_to<T>(-1.0f));
      comm.reduce_sum(send.data(), recv.data(), n, dtype_of<T>(), root);
      CHECK(same_bits(recv, comm.rank() == root
                                ? expected
                                : std::vector<T>(static_cast<std::size_t>(n), round_to<T>(-1.0f))));
      std::vector<T> in_place = send;
      comm.reduce_sum(in_place.data(), in_place.data(), n, dtype_of<T>(), root);
      CHECK(same_bits(in_place, comm.rank() == root ? expected : send));
    }
  }
}

void check_broadcast(Communicator& comm) {
  const int64_t n = (int64_t{3} << 20) + 7;
  for (int root = 0; root < comm.size(); ++root) {
    std::vector<int32_t> data(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) data[i] = static_cast<int32_t>(random_bits(comm.rank(), 3, i));
    comm.broadcast(data.data(), n, DType::i32, root);
    for (int64_t i = 0; i < n; ++i) CHECK(data[i] == static_cast<int32_t>(random_bits(root, 3, i)));
    std::vector<uint16_t> small = {static_cast<uint16_t>(comm.rank()), 9};
    comm.broadcast(small.data(), 2, DType::u16, root);
    CHECK(small[0] == root && small[1] == 9);
    fold(data);
  }
}

// Collectives queued back to back while this thread computes: each gives the bits of its blocking form.
void check_overlap(AsyncCommunicator& comm, uint64_t salt) {
  const int64_t n = 100000;
  std::vector<float> a = rank_data<float>(comm.rank(), n, salt),
                     b = rank_data<float>(comm.rank(), n, salt + 1);
  const AsyncCommunicator::Ticket first =
      comm.start([&](Communicator& c) { c.all_reduce_sum(a.data(), n, DType::f32); });
  const AsyncCommunicator::Ticket second =
      comm.start([&](Communicator& c) { c.reduce_sum(b.data(), b.data(), n, DType::f32, comm.size() - 1); });
  CHECK(second == first + 1);
  double busy = 0;
  for (int64_t i = 0; i < n; ++i) busy += std::sqrt(static_cast<double>(i));
  CHECK(busy > 0);
  comm.wait(second);
  CHECK(same_bits(a, expected_sum<float>(comm.size(), n, salt)));
  if (comm.rank() == comm.size() - 1) CHECK(same_bits(b, expected_sum<float>(comm.size(), n, salt + 1)));
  CHECK(comm.take_busy_seconds() > 0);
}

int run_checks() {
  const auto comm = std::make_unique<AsyncCommunicator>(make_communicator(DistBackend::mpi));
  g_rank = comm->rank();
  const int ranks = comm->size();
  CHECK(comm->backend() == "mpi");
  CHECK(comm->rank() >= 0 && comm->rank() < ranks);
  const int64_t buffer = comm->buffer_bytes();
  CHECK((buffer > 0) == (ranks > 1));  // one rank exchanges nothing

  if (ranks >= 3) {  // the data is order-sensitive, so the sums below test the order, not just the values
    CHECK(!same_bits(expected_sum<float>(ranks, 1000, 1), expected_sum<float>(ranks, 1000, 1, true)));
  }
  check_all_reduce<float>(*comm, 100);
  check_all_reduce<bf16>(*comm, 200);
  check_padded_scatter_gather<float>(*comm, 300);
  check_padded_scatter_gather<bf16>(*comm, 400);
  check_reduce<float>(*comm, 500);
  check_reduce<bf16>(*comm, 600);
  check_broadcast(*comm);
  check_overlap(*comm, 700);
  CHECK(comm->buffer_bytes() == buffer);  // no call grew it

  bool rejected = false;
  try {
    int32_t x = 0;
    comm->broadcast(&x, 1, DType::i32, ranks);
  } catch (const std::invalid_argument&) {
    rejected = true;
  }
  CHECK(rejected);
  rejected = false;
  try {
    float x = 0;
    comm->reduce_sum(&x, &x, 1, DType::f32, -1);
  } catch (const std::invalid_argument&) {
    rejected = true;
  }
  CHECK(rejected);

  // Every rank saw the same bits: gather the hashes (as i32 pairs) and compare.
  std::vector<int32_t> mine(2), all(static_cast<std::size_t>(2 * ranks));
  std::memcpy(mine.data(), &g_hash, sizeof g_hash);
  comm->all_gather(mine.data(), all.data(), 2, DType::i32);
  for (int r = 0; r < ranks; ++r) CHECK(all[2 * r] == mine[0] && all[2 * r + 1] == mine[1]);
  comm->barrier();
  if (comm->rank() == 0) std::printf("dist_mpi_test: %d ranks: every check passed\n", ranks);
  return 0;
}

// The last rank fails; the others wait in a collective that can never complete. mpirun must end the job.
int run_failure(const std::string& mode) {
  const auto comm = std::make_unique<AsyncCommunicator>(make_communicator(DistBackend::mpi));
  g_rank = comm->rank();
  std::vector<float> data(1000, 1.0f);
  if (comm->rank() == comm->size() - 1) {
    std::this_thread::sleep_for(
        std::chrono::milliseconds(300));  // the others are inside the collective by now
    if (mode == "exit") _exit(9);
    if (mode == "kill") std::raise(SIGKILL);
    if (mode == "throw") throw std::runtime_error("rank " + std::to_string(g_rank) + " failed on purpose");
    std::fprintf(stderr, "dist_mpi_test: unknown --fail mode %s\n", mode.c_str());
    std::_Exit(2);
  }
  comm->all_reduce_sum(data.data(), 1000, DType::f32);
  std::fprintf(stderr, "dist_mpi_test: rank %d: the collective completed without the failed rank\n", g_rank);
  return 0;
}

}  // namespace
}  // namespace mt

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::string(argv[1]) == "--fail") return mt::run_failure(argv[2]);
    if (argc == 1) return mt::run_checks();
    std::fprintf(stderr, "usage: dist_mpi_test [--fail exit|kill|throw]\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_mpi_test: rank %d: error: %s\n", mt::g_rank, e.what());
    return 1;
  }
}
