// The MPI communicator, run by CTest under mpirun with 1 to 4 ranks (tests/dist/CMakeLists.txt), behind the
// AsyncCommunicator the trainer puts around it, so every collective runs on its worker thread; and the groups
// split from it, on the same worker. Every rank computes all ranks' data itself, so it knows the exact bits
// each collective must give.
//
//   dist_mpi_test                        every check; a failed check prints its rank and line and exits 1
//   dist_mpi_test --fail MODE            the last rank fails while the others are in a collective: exit
//                                        (_exit(9)), kill (SIGKILL) or throw (an exception unwinds past the
//                                        communicator)
//   dist_mpi_test --fail-in-group MODE   the same, while its partner is in an all-reduce of their group
//   dist_mpi_test --stall EXCHANGE       under a time limit of 1.5 s, the last rank never joins EXCHANGE
//                                        (send_recv, all_reduce_sum, barrier, or group: its partner's
//                                        all-reduce in a group of two), in which the others wait
#include <unistd.h>

#include <algorithm>
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
#include <utility>
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

// The world ranks of a communicator's members, in its rank order: its rank r contributes the data of world
// rank members[r].
using Members = std::vector<int>;

Members world_members(int ranks) {
  Members members(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) members[r] = r;
  return members;
}

// The contract, computed independently of the library: fp32 sums in the members' order, rounded once.
template <typename T>
std::vector<T> expected_sum(const Members& members, int64_t n, uint64_t salt) {
  std::vector<std::vector<T>> data;
  for (int r : members) data.push_back(rank_data<T>(r, n, salt));
  std::vector<T> sum(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    float s = to_f32(data[0][i]);
    for (std::size_t r = 1; r < data.size(); ++r) s += to_f32(data[r][i]);
    sum[i] = round_to<T>(s);
  }
  return sum;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// FNV-1a over every result this rank saw of one communicator's collectives, to compare its ranks after.
constexpr uint64_t kHashStart = 0xcbf29ce484222325ull;
uint64_t g_hash = kHashStart;
template <typename T>
void fold(const std::vector<T>& v) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(v.data());
  for (std::size_t i = 0; i < v.size() * sizeof(T); ++i) g_hash = (g_hash ^ bytes[i]) * 0x100000001b3ull;
}

// Every rank of comm saw the same bits: gather the hashes (as i32 pairs) and compare; then start again.
void check_same_results(Communicator& comm) {
  std::vector<int32_t> mine(2), all(static_cast<std::size_t>(2 * comm.size()));
  std::memcpy(mine.data(), &g_hash, sizeof g_hash);
  comm.all_gather(mine.data(), all.data(), 2, DType::i32);
  for (int r = 0; r < comm.size(); ++r) CHECK(all[2 * r] == mine[0] && all[2 * r + 1] == mine[1]);
  g_hash = kHashStart;
}

// Counts around the edges: empty, fewer elements than ranks, uneven splits, and past one round (1 MiB per
// peer, kRoundBytes in mpi_communicator.cpp): two all-reduce windows, two reduce-scatter and gather rounds.
std::vector<int64_t> counts(int ranks, DType dtype) {
  const int64_t round = (int64_t{1} << 20) / static_cast<int64_t>(dtype_size(dtype));
  return {0, 1, ranks - 1, ranks + 1, 1000, ranks * round + 5};
}

template <typename T>
void check_all_reduce(Communicator& comm, const Members& members, uint64_t salt) {
  for (int64_t n : counts(comm.size(), dtype_of<T>())) {
    std::vector<T> data = rank_data<T>(g_rank, n, salt + static_cast<uint64_t>(n));
    std::vector<T> again = data;
    comm.all_reduce_sum(data.data(), n, dtype_of<T>());
    CHECK(same_bits(data, expected_sum<T>(members, n, salt + static_cast<uint64_t>(n))));
    comm.all_reduce_sum(again.data(), n, dtype_of<T>());
    CHECK(same_bits(again, data));  // a repeated call gives the same bits
    fold(data);
  }
}

// The layout a ZeRO caller uses: a logical n padded to size() * ceil(n / size()) with zeros.
template <typename T>
void check_padded_scatter_gather(Communicator& comm, const Members& members, uint64_t salt) {
  const int ranks = comm.size();
  for (int64_t n : counts(ranks, dtype_of<T>())) {
    const int64_t count = (n + ranks - 1) / ranks;
    std::vector<T> send = rank_data<T>(g_rank, n, salt + static_cast<uint64_t>(n));
    send.resize(static_cast<std::size_t>(ranks * count), round_to<T>(0.0f));
    std::vector<T> expected = expected_sum<T>(members, n, salt + static_cast<uint64_t>(n));
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
void check_reduce(Communicator& comm, const Members& members, uint64_t salt) {
  for (int64_t n : counts(comm.size(), dtype_of<T>())) {
    const std::vector<T> expected = expected_sum<T>(members, n, salt + static_cast<uint64_t>(n));
    for (int root = 0; root < comm.size(); ++root) {
      const std::vector<T> send = rank_data<T>(g_rank, n, salt + static_cast<uint64_t>(n));
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

void check_broadcast(Communicator& comm, const Members& members) {
  const int64_t n = (int64_t{3} << 20) + 7;
  for (int root = 0; root < comm.size(); ++root) {
    std::vector<int32_t> data(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) data[i] = static_cast<int32_t>(random_bits(g_rank, 3, i));
    comm.broadcast(data.data(), n, DType::i32, root);
    for (int64_t i = 0; i < n; ++i) CHECK(data[i] == static_cast<int32_t>(random_bits(members[root], 3, i)));
    std::vector<uint16_t> small = {static_cast<uint16_t>(comm.rank()), 9};
    comm.broadcast(small.data(), 2, DType::u16, root);
    CHECK(small[0] == root && small[1] == 9);
    fold(data);
  }
}

// Every collective in every summed dtype, each against the reference; then the ranks compare what they saw.
void check_collectives(Communicator& comm, const Members& members, uint64_t salt) {
  check_all_reduce<float>(comm, members, salt + 100);
  check_all_reduce<bf16>(comm, members, salt + 200);
  check_all_reduce<f16>(comm, members, salt + 300);
  check_padded_scatter_gather<float>(comm, members, salt + 400);
  check_padded_scatter_gather<bf16>(comm, members, salt + 500);
  check_padded_scatter_gather<f16>(comm, members, salt + 600);
  check_reduce<float>(comm, members, salt + 700);
  check_reduce<bf16>(comm, members, salt + 800);
  check_reduce<f16>(comm, members, salt + 900);
  check_broadcast(comm, members);
  check_same_results(comm);
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
  CHECK(same_bits(a, expected_sum<float>(world_members(comm.size()), n, salt)));
  if (comm.rank() == comm.size() - 1)
    CHECK(same_bits(b, expected_sum<float>(world_members(comm.size()), n, salt + 1)));
  CHECK(comm.take_busy_seconds() > 0);
}

// A group of `parent` (whose members are parent_members) split by color_of and key_of of the parent rank,
// and its members by the reference rule: the parent's ranks of this rank's color, ordered by key, then by
// parent rank. Checks the group's place and buffer.
struct Group {
  std::unique_ptr<AsyncCommunicator> comm;
  Members members;
};
template <typename ColorOf, typename KeyOf>
Group split_checked(AsyncCommunicator& parent, const Members& parent_members, ColorOf color_of,
                    KeyOf key_of) {
  std::vector<int> ranks;  // of the parent
  for (int p = 0; p < parent.size(); ++p)
    if (color_of(p) == color_of(parent.rank())) ranks.push_back(p);
  std::stable_sort(ranks.begin(), ranks.end(), [&](int a, int b) { return key_of(a) < key_of(b); });
  Group group{parent.split(color_of(parent.rank()), key_of(parent.rank())), {}};
  for (int p : ranks) group.members.push_back(parent_members[p]);
  CHECK(group.comm->size() == static_cast<int>(group.members.size()));
  CHECK(group.comm->rank() >= 0 && group.comm->rank() < group.comm->size());
  CHECK(group.members[group.comm->rank()] == g_rank);
  CHECK(group.comm->backend() == "mpi");
  CHECK(group.comm->buffer_bytes() == mpi_buffer_bytes(group.comm->size()));
  return group;
}

// Collectives of two groups and the world in flight together on the shared worker, each waited for through
// another facade than the one that queued it.
void check_interleaved(AsyncCommunicator& world, const Group& tensor, const Group& data, uint64_t salt) {
  const int64_t n = 50000, m = 20000;
  const Members everyone = world_members(world.size());
  std::vector<float> a = rank_data<float>(g_rank, n, salt), d = rank_data<float>(g_rank, n, salt + 3);
  std::vector<bf16> b = rank_data<bf16>(g_rank, n, salt + 1);
  const std::vector<f16> c = rank_data<f16>(g_rank, data.comm->size() * m, salt + 2);
  std::vector<f16> shard(static_cast<std::size_t>(m)), gathered(c.size());
  const int root = tensor.comm->size() - 1;
  const AsyncCommunicator::Ticket first =
      tensor.comm->start([&](Communicator& g) { g.all_reduce_sum(a.data(), n, DType::f32); });
  CHECK(world.start([&](Communicator& w) { w.all_reduce_sum(b.data(), n, DType::bf16); }) == first + 1);
  CHECK(data.comm->start([&](Communicator& g) {
    g.reduce_scatter_sum(c.data(), shard.data(), m, DType::f16);
  }) == first + 2);
  CHECK(tensor.comm->start([&](Communicator& g) { g.reduce_sum(d.data(), d.data(), n, DType::f32, root); }) ==
        first + 3);
  const AsyncCommunicator::Ticket last =
      data.comm->start([&](Communicator& g) { g.all_gather(shard.data(), gathered.data(), m, DType::f16); });
  CHECK(last == first + 4);
  data.comm->wait(first + 1);
  CHECK(same_bits(a, expected_sum<float>(tensor.members, n, salt)));
  CHECK(same_bits(b, expected_sum<bf16>(everyone, n, salt + 1)));
  world.wait(last);
  const std::vector<f16> c_sum = expected_sum<f16>(data.members, data.comm->size() * m, salt + 2);
  const auto mine = c_sum.begin() + data.comm->rank() * m;
  CHECK(same_bits(shard, std::vector<f16>(mine, mine + m)));
  CHECK(same_bits(gathered, c_sum));
  if (tensor.comm->rank() == root) CHECK(same_bits(d, expected_sum<float>(tensor.members, n, salt + 3)));
  CHECK(tensor.comm->take_busy_seconds() > 0);  // the shared worker's
}

// Megatron's layout: tensor-parallel groups of 2 adjacent ranks, data-parallel groups across them (here in
// reverse, by key); and every rank but 0 in reverse, split again by that group's rank, for groups of 3 and
// more, whose sums show their order.
void check_groups(AsyncCommunicator& world, const Members& everyone) {
  const int ranks = world.size();
  const Group tensor = split_checked(
      world, everyone, [](int r) { return r / 2; }, [](int) { return 0; });
  const Group data = split_checked(
      world, everyone, [](int r) { return r % 2; }, [](int r) { return -r; });
  check_collectives(*tensor.comm, tensor.members, 10000);
  check_collectives(*data.comm, data.members, 20000);
  check_interleaved(world, tensor, data, 30000);
  const Group rest = split_checked(
      world, everyone, [](int r) { return r == 0 ? 0 : 1; }, [=](int r) { return ranks - r; });
  if (rest.members.size() >= 3) {
    Members reversed(rest.members.rbegin(), rest.members.rend());
    CHECK(!same_bits(expected_sum<float>(rest.members, 1000, 1), expected_sum<float>(reversed, 1000, 1)));
  }
  check_collectives(*rest.comm, rest.members, 40000);
  const Group nested = split_checked(
      *rest.comm, rest.members, [](int r) { return r % 2; }, [](int) { return 0; });
  check_collectives(*nested.comm, nested.members, 50000);
}

int run_checks() {
  const auto comm = std::make_unique<AsyncCommunicator>(make_communicator(DistBackend::mpi));
  g_rank = comm->rank();
  const int ranks = comm->size();
  const Members everyone = world_members(ranks);
  CHECK(comm->backend() == "mpi");
  CHECK(comm->rank() >= 0 && comm->rank() < ranks);
  const int64_t buffer = comm->buffer_bytes();
  CHECK(buffer == mpi_buffer_bytes(ranks));
  CHECK((buffer > 0) == (ranks > 1));  // one rank exchanges nothing

  if (ranks >= 3) {  // the data is order-sensitive, so the sums below test the order, not just the values
    const Members reversed(everyone.rbegin(), everyone.rend());
    CHECK(!same_bits(expected_sum<float>(everyone, 1000, 1), expected_sum<float>(reversed, 1000, 1)));
  }
  check_collectives(*comm, everyone, 0);
  check_overlap(*comm, 700);
  check_groups(*comm, everyone);
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
  comm->barrier();
  if (comm->rank() == 0) std::printf("dist_mpi_test: %d ranks: every check passed\n", ranks);
  return 0;
}

// The last rank fails; the others wait in a collective that can never complete. mpirun must end the job.
// In a group: tensor groups of 2 adjacent ranks, so that the last rank's partner waits in their group's
// all-reduce, and the other groups finish theirs and wait in the world's.
int run_failure(const std::string& mode, bool in_group) {
  const auto comm = std::make_unique<AsyncCommunicator>(make_communicator(DistBackend::mpi));
  g_rank = comm->rank();
  const int last = comm->size() - 1;
  const auto group = in_group ? comm->split(g_rank / 2, 0) : nullptr;
  std::vector<float> data(1000, 1.0f);
  if (g_rank == last) {
    std::this_thread::sleep_for(
        std::chrono::milliseconds(300));  // the others are inside the collective by now
    if (mode == "exit") _exit(9);
    if (mode == "kill") std::raise(SIGKILL);
    if (mode == "throw") throw std::runtime_error("rank " + std::to_string(g_rank) + " failed on purpose");
    std::fprintf(stderr, "dist_mpi_test: unknown --fail mode %s\n", mode.c_str());
    std::_Exit(2);
  }
  if (group) {
    group->all_reduce_sum(data.data(), 1000, DType::f32);
    if (g_rank / 2 == last / 2)
      std::fprintf(stderr, "dist_mpi_test: rank %d: the group collective completed without the failed rank\n",
                   g_rank);
  }
  comm->all_reduce_sum(data.data(), 1000, DType::f32);
  std::fprintf(stderr, "dist_mpi_test: rank %d: the collective completed without the failed rank\n", g_rank);
  return 0;
}

// The last rank sleeps instead of joining `exchange`; the ranks waiting in it must end the job once the time
// limit is past, naming the exchange and the last rank.
int run_stall(const std::string& exchange) {
  constexpr double kLimitSeconds = 1.5;
  const auto comm = std::make_unique<AsyncCommunicator>(make_communicator(DistBackend::mpi, kLimitSeconds));
  g_rank = comm->rank();
  const int last = comm->size() - 1;
  const auto group = exchange == "group" ? comm->split(g_rank / 2, 0) : nullptr;
  if (g_rank == last) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    std::fprintf(stderr, "dist_mpi_test: rank %d: nobody ended the job\n", g_rank);
    return 1;
  }
  std::vector<float> data(1000, 1.0f);
  if (exchange == "send_recv") {
    if (g_rank == 0) comm->send_recv(nullptr, 0, data.data(), 1000, DType::f32, last);
  } else if (exchange == "all_reduce_sum") {
    comm->all_reduce_sum(data.data(), 1000, DType::f32);
  } else if (exchange == "barrier") {
    comm->barrier();
  } else if (exchange == "group") {
    group->all_reduce_sum(data.data(), 1000, DType::f32);
  } else {
    std::fprintf(stderr, "dist_mpi_test: unknown --stall exchange %s\n", exchange.c_str());
    return 2;
  }
  // The others wait here for the ranks that wait for the last one.
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return 0;
}

}  // namespace
}  // namespace mt

int main(int argc, char** argv) {
  try {
    if (argc == 3 && std::string(argv[1]) == "--fail") return mt::run_failure(argv[2], false);
    if (argc == 3 && std::string(argv[1]) == "--fail-in-group") return mt::run_failure(argv[2], true);
    if (argc == 3 && std::string(argv[1]) == "--stall") return mt::run_stall(argv[2]);
    if (argc == 1) return mt::run_checks();
    std::fprintf(stderr,
                 "usage: dist_mpi_test [--fail|--fail-in-group exit|kill|throw | --stall EXCHANGE]\n");
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_mpi_test: rank %d: error: %s\n", mt::g_rank, e.what());
    return 1;
  }
}
