#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "dist/async_communicator.h"
#include "dist/communicator.h"
#include "dist/local_sum.h"

namespace mt {
namespace {

// Sets an environment variable for one scope, restoring the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.has_value()) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

int usage_error_of(const std::string& backend, std::string* message) {
  try {
    make_communicator(parse_dist_backend(backend));
  } catch (const Error& e) {
    *message = e.what();
    return e.exit_code();
  }
  return 0;
}

TEST(DistSingle, AutoOutsideMpirunIsSingle) {
  const auto comm = make_communicator(DistBackend::automatic);
  EXPECT_EQ(comm->backend(), "single");
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->buffer_bytes(), 0);
  EXPECT_EQ(make_communicator(DistBackend::single)->backend(), "single");
}

TEST(DistSingle, AutoUnderOneRankMpirunIsSingle) {
  ScopedEnv ranks("OMPI_COMM_WORLD_SIZE", "1");
  EXPECT_EQ(make_communicator(DistBackend::automatic)->backend(), "single");
}

TEST(DistSingle, SumsAreTheData) {
  const auto comm = make_communicator(DistBackend::single);
  std::vector<float> f = {1.5f, -0.0f, 3e38f, 1e-45f};
  const std::vector<float> f_before = f;
  comm->all_reduce_sum(f.data(), static_cast<int64_t>(f.size()), DType::f32);
  for (std::size_t i = 0; i < f.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(f[i]), std::bit_cast<uint32_t>(f_before[i]));

  std::vector<bf16> h = {round_to<bf16>(1.0f + 0x1p-7f), round_to<bf16>(-2.5f)};
  comm->all_reduce_sum(h.data(), 2, DType::bf16);
  EXPECT_EQ(to_f32(h[0]), 1.0f + 0x1p-7f);
  EXPECT_EQ(to_f32(h[1]), -2.5f);

  std::vector<float> recv(4, 0.0f);
  comm->reduce_scatter_sum(f.data(), recv.data(), 4, DType::f32);
  EXPECT_EQ(recv, f);
  std::vector<float> reduced(4, 0.0f);
  comm->reduce_sum(f.data(), reduced.data(), 4, DType::f32, 0);
  EXPECT_EQ(reduced, f);
}

TEST(DistSingle, GatherAndBroadcastCopyAnyDtype) {
  const auto comm = make_communicator(DistBackend::single);
  const std::vector<int32_t> send = {7, -1, 1 << 30};
  std::vector<int32_t> recv(3, 0);
  comm->all_gather(send.data(), recv.data(), 3, DType::i32);
  EXPECT_EQ(recv, send);
  comm->all_gather(recv.data(), recv.data(), 3, DType::i32);  // in place: send is recv + rank() * count
  EXPECT_EQ(recv, send);

  std::vector<uint16_t> data = {1, 2, 3};
  comm->broadcast(data.data(), 3, DType::u16, 0);
  EXPECT_EQ(data, (std::vector<uint16_t>{1, 2, 3}));
  comm->barrier();
}

TEST(DistSingle, RejectsBadArguments) {
  const auto comm = make_communicator(DistBackend::single);
  int32_t i = 0;
  EXPECT_THROW(comm->all_reduce_sum(&i, 1, DType::i32), std::invalid_argument);
  EXPECT_THROW(comm->reduce_scatter_sum(&i, &i, 1, DType::u16), std::invalid_argument);
  EXPECT_THROW(comm->all_gather(&i, &i, -1, DType::i32), std::invalid_argument);
  EXPECT_THROW(comm->broadcast(&i, 1, DType::i32, 1), std::invalid_argument);
  float x = 0;
  EXPECT_THROW(comm->reduce_sum(&x, &x, 1, DType::f32, 1), std::invalid_argument);
  EXPECT_THROW(comm->split(-1, 0), std::invalid_argument);
}

TEST(DistSingle, SplitGivesOneRankAgain) {
  const auto comm = make_communicator(DistBackend::single);
  const auto group = comm->split(3, -7);
  EXPECT_EQ(group->backend(), "single");
  EXPECT_EQ(group->rank(), 0);
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->buffer_bytes(), 0);
  std::vector<uint16_t> h = {round_to<f16>(0.1f).bits, round_to<f16>(-3.0f).bits};
  const std::vector<uint16_t> before = h;
  group->split(0, 0)->all_reduce_sum(h.data(), 2, DType::f16);
  EXPECT_EQ(h, before);
}

TEST(DistSingle, UnknownBackendIsAUsageError) {
  for (const char* backend : {"", "nccl", "MPI", "single "}) {
    std::string message;
    EXPECT_EQ(usage_error_of(backend, &message), static_cast<int>(ErrorKind::usage)) << backend;
    EXPECT_NE(message.find("--dist-backend"), std::string::npos) << message;
  }
}

#ifndef MEMTRAIN_HAVE_MPI
TEST(DistSingle, MpiWithoutMpiIsAUsageError) {
  std::string message;
  EXPECT_EQ(usage_error_of("mpi", &message), static_cast<int>(ErrorKind::usage));
  EXPECT_NE(message.find("--dist-backend"), std::string::npos) << message;
  ScopedEnv ranks("OMPI_COMM_WORLD_SIZE", "2");
  EXPECT_EQ(usage_error_of("auto", &message), static_cast<int>(ErrorKind::usage));
  EXPECT_NE(message.find("--dist-backend"), std::string::npos) << message;
}
#endif

TEST(DistLocalSum, AddsInRankOrderAndRoundsBf16Once) {
  // In fp32, (1 + 2^-24) + 2^-24 is 1 but 1 + (2^-24 + 2^-24) is 1 + 2^-23: the order shows in the bits.
  const std::vector<float> a = {1.0f, 0x1p-24f}, b = {0x1p-24f, 0x1p-24f}, c = {0x1p-24f, 1.0f};
  std::vector<float> out(2);
  const void* parts[] = {a.data(), b.data(), c.data()};
  sum_in_rank_order(parts, out.data(), 2, DType::f32);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 1.0f + 0x1p-23f);

  // bf16 keeps 7 mantissa bits: 1 + 2^-9 + 2^-9 + 2^-9 is 1 when rounded after every addition, and rounds to
  // 1 + 2^-7 when the fp32 sum 1 + 3 * 2^-9 is rounded once.
  const std::vector<bf16> one = {round_to<bf16>(1.0f)}, tiny = {round_to<bf16>(0x1p-9f)};
  bf16 sum{};
  const void* halves[] = {one.data(), tiny.data(), tiny.data(), tiny.data()};
  sum_in_rank_order(halves, &sum, 1, DType::bf16);
  EXPECT_EQ(to_f32(sum), 1.0f + 0x1p-7f);
}

TEST(DistLocalSum, RoundsF16OnceToNearestEven) {
  // f16 keeps 10 mantissa bits: adding 2^-12 to 1 three times stays 1 when rounded after every addition, and
  // the fp32 sum 1 + 3 * 2^-12 rounds once to 1 + 2^-10.
  const f16 one = round_to<f16>(1.0f), quarter = round_to<f16>(0x1p-12f);
  f16 sum{};
  const void* quarters[] = {&one, &quarter, &quarter, &quarter};
  sum_in_rank_order(quarters, &sum, 1, DType::f16);
  EXPECT_EQ(to_f32(sum), 1.0f + 0x1p-10f);
  // Halfway cases go to the even neighbour: 1 + 2^-11 to 1, 1 + 3 * 2^-11 to 1 + 2^-9.
  const f16 half = round_to<f16>(0x1p-11f), odd = round_to<f16>(1.0f + 0x1p-10f);
  const void* to_even_below[] = {&one, &half};
  sum_in_rank_order(to_even_below, &sum, 1, DType::f16);
  EXPECT_EQ(to_f32(sum), 1.0f);
  const void* to_even_above[] = {&odd, &half};
  sum_in_rank_order(to_even_above, &sum, 1, DType::f16);
  EXPECT_EQ(to_f32(sum), 1.0f + 0x1p-9f);
}

TEST(DistLocalSum, ResultIsIndependentOfThreadsAndMayOverwriteAPart) {
  // Long enough to be split between OpenMP threads.
  const int64_t n = 100'003;
  std::vector<float> a(n), b(n), expected(n);
  for (int64_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 977) * 0.37f - 100.0f;
    b[i] = 1.0f / static_cast<float>(i + 1);
    expected[i] = a[i] + b[i];
  }
  const void* parts[] = {a.data(), b.data()};
  sum_in_rank_order(parts, a.data(), n, DType::f32);
  EXPECT_EQ(a, expected);
  EXPECT_THROW(sum_in_rank_order(parts, a.data(), n, DType::i32), std::invalid_argument);
}

TEST(DistLocalSum, DoublesSumInDoubleInRankOrder) {
  // 1 + 2^-40 is lost in fp32, kept in double; (1e16 + 1) + 1 differs from 1e16 + (1 + 1) in double.
  const double one = 1.0, tiny = 0x1p-40, big = 1e16;
  double sum = 0;
  const void* kept[] = {&one, &tiny};
  sum_in_rank_order(kept, &sum, 1, DType::f64);
  EXPECT_EQ(sum, 1.0 + 0x1p-40);
  const void* in_order[] = {&big, &one, &one};
  sum_in_rank_order(in_order, &sum, 1, DType::f64);
  EXPECT_EQ(sum, (big + one) + one);
  EXPECT_NE(sum, big + (one + one));
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

// Work runs in submission order on the worker; a failure comes back from the wait that covers it, once.
TEST(DistAsync, RunsInOrderAndRethrowsEachFailureOnce) {
  AsyncCommunicator comm(make_communicator(DistBackend::single));
  std::vector<int> order;
  const auto first = comm.start([&](Communicator&) { order.push_back(1); });
  const auto failing = comm.start([](Communicator& c) {
    int32_t i = 0;
    c.all_reduce_sum(&i, 1, DType::i32);  // not a summable dtype
  });
  const auto last = comm.start([&](Communicator&) { order.push_back(3); });
  EXPECT_EQ(failing, first + 1);
  comm.wait(first);
  EXPECT_THROW(comm.wait(last), std::invalid_argument);
  EXPECT_NO_THROW(comm.wait(last));
  EXPECT_EQ(order, (std::vector<int>{1, 3}));
  std::vector<float> f = {1.0f, 2.0f}, recv(2);
  comm.reduce_sum(f.data(), recv.data(), 2, DType::f32, 0);  // the blocking form: start + wait
  EXPECT_EQ(recv, f);
  EXPECT_THROW(comm.broadcast(f.data(), 2, DType::f32, 1), std::invalid_argument);
  EXPECT_GE(comm.take_busy_seconds(), 0.0);
  EXPECT_EQ(comm.size(), 1);
}

// A group queues on its root's worker: one thread, one numbering of tickets, failures rethrown by whichever
// facade waits, busy time shared; each facade's work gets its own inner communicator.
TEST(DistAsync, GroupsShareTheRootsWorker) {
  AsyncCommunicator world(make_communicator(DistBackend::single));
  const auto group = world.split(1, 0);
  const auto subgroup = group->split(0, 5);
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(subgroup->rank(), 0);
  EXPECT_EQ(group->buffer_bytes(), 0);
  std::vector<std::thread::id> threads;
  std::vector<const Communicator*> inners;
  auto record = [&](Communicator& c) {
    threads.push_back(std::this_thread::get_id());
    inners.push_back(&c);
  };
  const auto first = world.start(record);
  EXPECT_EQ(group->start(record), first + 1);
  EXPECT_EQ(subgroup->start(record), first + 2);
  EXPECT_EQ(world.start(record), first + 3);
  const auto failing = group->start([](Communicator& c) {
    float x = 0;
    c.broadcast(&x, 1, DType::f32, 1);  // no rank 1
  });
  EXPECT_THROW(world.wait(failing), std::invalid_argument);
  EXPECT_NO_THROW(subgroup->wait_all());
  ASSERT_EQ(threads.size(), 4u);
  for (const std::thread::id id : threads) EXPECT_EQ(id, threads[0]);
  EXPECT_NE(threads[0], std::this_thread::get_id());
  EXPECT_EQ(inners[0], inners[3]);
  EXPECT_NE(inners[0], inners[1]);
  EXPECT_NE(inners[1], inners[2]);

  world.take_busy_seconds();
  group->start([](Communicator&) { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  group->wait_all();
  EXPECT_GE(world.take_busy_seconds(), 0.015);
  EXPECT_EQ(group->take_busy_seconds(), 0.0);

  EXPECT_THROW(world.split(-1, 0), std::invalid_argument);
  Communicator& base = world;  // Communicator::split gives the same kind of group
  EXPECT_NE(dynamic_cast<AsyncCommunicator*>(base.split(0, 0).get()), nullptr);
}

}  // namespace
}  // namespace mt
