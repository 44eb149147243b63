// Collectives over MPI point-to-point messages, so that the order of every sum is ours, not the MPI
// library's: each rank receives all ranks' contributions to its own chunk and adds them in rank order
// (local_sum.h).
#include "dist/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/host_name.h"
#include "dist/local_sum.h"

namespace mt {
namespace {

// Waiting for messages: this many polls back to back, then a pause between polls (see wait_all).
constexpr int kBusyPolls = 64;
constexpr std::chrono::microseconds kPollPause{20};
// A broadcast or a point-to-point exchange goes in messages of at most this many bytes, as MPI counts are
// ints.
constexpr int64_t kBroadcastBytes = int64_t{1} << 30;

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw std::runtime_error(std::string(call) +
                           " failed: " + std::string(text, static_cast<std::size_t>(length)));
}

// The bytes of one element of a sum of `count` values of `dtype`, once both are checked for `operation`.
int64_t summed_element_bytes(int64_t count, DType dtype, const char* operation) {
  check_count(count, operation);
  check_sum_dtype(dtype, operation);
  return static_cast<int64_t>(dtype_size(dtype));
}

// A piece of memory one message sends or receives.
struct Piece {
  const std::byte* data;
  int64_t bytes;
};

// MPI is initialised once per process, by the world's communicator (make_mpi_communicator).
void initialise_mpi() {
  int initialized = 0, finalized = 0;
  check(MPI_Initialized(&initialized), "MPI_Initialized");
  check(MPI_Finalized(&finalized), "MPI_Finalized");
  if (initialized || finalized)
    throw std::runtime_error("MPI was initialised before: one MPI communicator per process");
  // One thread at a time talks to MPI: the caller, or the worker of an AsyncCommunicator around this one
  // (never both at once); OpenMP threads inside kernels never do.
  int provided = 0;
  check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  if (provided < MPI_THREAD_SERIALIZED)
    throw std::runtime_error("this MPI library cannot serve collectives from a worker thread");
}

// What a communicator releases when destroyed: the world's finalises MPI, a group's frees its MPI_Comm.
enum class Releases { mpi, comm };

// The world rank of each rank of `comm`, for messages that name a peer.
std::vector<int> world_ranks(MPI_Comm comm, int size) {
  MPI_Group group = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  check(MPI_Comm_group(comm, &group), "MPI_Comm_group");
  check(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
  std::vector<int> ranks(static_cast<std::size_t>(size)), in_world(ranks.size());
  for (int r = 0; r < size; ++r) ranks[static_cast<std::size_t>(r)] = r;
  check(MPI_Group_translate_ranks(group, size, ranks.data(), world, in_world.data()),
        "MPI_Group_translate_ranks");
  MPI_Group_free(&group);
  MPI_Group_free(&world);
  return in_world;
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, Releases releases, double timeout_seconds)
      : comm_(comm), releases_(releases), timeout_(timeout_seconds) {
    // Errors come back as codes, which become exceptions, instead of aborting inside MPI.
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    world_ranks_ = world_ranks(comm_, size_);
    buffer_.resize(static_cast<std::size_t>(mpi_buffer_bytes(size_)));
    // At least one: a barrier's, even in a group of one rank.
    requests_.resize(static_cast<std::size_t>(std::max(1, 2 * (size_ - 1))));
    request_peers_.resize(requests_.size());
    parts_.resize(static_cast<std::size_t>(size_));
  }

  ~MpiCommunicator() override {
    // MPI_Finalize waits for every rank, and MPI_Comm_free is collective. A failing rank skips both and exits
    // unfinalised, which makes mpirun end the job; either call could leave it, or the other ranks, blocked.
    if (std::uncaught_exceptions() > 0) return;
    if (releases_ == Releases::mpi) {
      MPI_Finalize();
      return;
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }
  int64_t buffer_bytes() const override { return static_cast<int64_t>(buffer_.size()); }

  void all_reduce_sum(void* data, int64_t count, DType dtype) override {
    operation_ = "all_reduce_sum";
    const int64_t es = summed_element_bytes(count, dtype, "all_reduce_sum");
    auto* base = static_cast<std::byte*>(data);
    // Windows of size() rounds: each rank sums one chunk of the window, then every rank gathers every chunk.
    const int64_t window = size_ * (kMpiRoundBytes / es);
    for (int64_t w = 0; w < count; w += window) {
      const int64_t n = std::min(window, count - w), chunk = (n + size_ - 1) / size_;
      auto chunk_of = [&](int p) {
        const int64_t begin = std::min(p * chunk, n);
        return Piece{base + (w + begin) * es, (std::min(begin + chunk, n) - begin) * es};
      };
      const Piece mine = chunk_of(rank_);
      exchange([&](int p) { return chunk_of(p); }, [&](int p) { return Piece{slot(p), mine.bytes}; });
      std::byte* out = base + (w + std::min(rank_ * chunk, n)) * es;  // where mine.data points
      sum_round(mine.data, out, mine.bytes / es, dtype);
      exchange([&](int) { return mine; }, [&](int p) { return chunk_of(p); });
    }
  }

  void reduce_scatter_sum(const void* send, void* recv, int64_t count, DType dtype) override {
    operation_ = "reduce_scatter_sum";
    const int64_t es = summed_element_bytes(count, dtype, "reduce_scatter_sum");
    const auto* in = static_cast<const std::byte*>(send);
    auto* out = static_cast<std::byte*>(recv);
    const int64_t round = kMpiRoundBytes / es;
    for (int64_t o = 0; o < count; o += round) {
      const int64_t n = std::min(round, count - o);
      auto to_peer = [&](int p) { return Piece{in + (p * count + o) * es, n * es}; };
      exchange(to_peer, [&](int p) { return Piece{slot(p), n * es}; });
      sum_round(in + (rank_ * count + o) * es, out + o * es, n, dtype);
    }
  }

  void reduce_sum(const void* send, void* recv, int64_t count, DType dtype, int root) override {
    operation_ = "reduce_sum";
    const int64_t es = summed_element_bytes(count, dtype, "reduce_sum");
    check_root(root, "reduce_sum");
    const auto* in = static_cast<const std::byte*>(send);
    auto* out = static_cast<std::byte*>(recv);
    const int64_t round = kMpiRoundBytes / es;
    for (int64_t o = 0; o < count; o += round) {
      const int64_t n = std::min(round, count - o);
      if (rank_ != root) {
        std::size_t r = 0;
        post_send(in + o * es, n * es, root, r);
        wait_all(static_cast<int>(r));
        continue;
      }
      receive_round(n * es);
      sum_round(in + o * es, out + o * es, n, dtype);
    }
  }

  void all_gather(const void* send, void* recv, int64_t count, DType dtype) override {
    operation_ = "all_gather";
    check_count(count, "all_gather");
    const int64_t es = static_cast<int64_t>(dtype_size(dtype));
    const auto* in = static_cast<const std::byte*>(send);
    auto* out = static_cast<std::byte*>(recv);
    const int64_t round = kMpiRoundBytes / es;
    for (int64_t o = 0; o < count; o += round) {
      const int64_t n = std::min(round, count - o);
      auto from_peer = [&](int p) { return Piece{out + (p * count + o) * es, n * es}; };
      exchange([&](int) { return Piece{in + o * es, n * es}; }, from_peer);
    }
    std::byte* own = out + rank_ * count * es;
    if (own != in && count > 0) std::memmove(own, in, static_cast<std::size_t>(count * es));
  }

  void broadcast(void* data, int64_t count, DType dtype, int root) override {
    operation_ = "broadcast";
    check_count(count, "broadcast");
    check_root(root, "broadcast");
    auto* bytes = static_cast<std::byte*>(data);
    const int64_t total = count * static_cast<int64_t>(dtype_size(dtype));
    // Point to point from the root, so that waiting pauses as in every other collective (wait_all).
    for (int64_t o = 0; o < total; o += kBroadcastBytes) {
      const int64_t n = std::min(kBroadcastBytes, total - o);
      std::size_t r = 0;
      if (rank_ == root) {
        for (int p = 0; p < size_; ++p)
          if (p != root) post_send(bytes + o, n, p, r);
      } else {
        post_recv(bytes + o, n, root, r);
      }
      wait_all(static_cast<int>(r));
    }
  }

  void send_recv(const void* send, int64_t send_count, void* recv, int64_t recv_count, DType dtype,
                 int peer) override {
    operation_ = "send_recv";
    check_count(send_count, "send_recv");
    check_count(recv_count, "send_recv");
    if (peer < 0 || peer >= size_ || peer == rank_)
      throw std::invalid_argument("send_recv: peer " + std::to_string(peer) + " of rank " +
                                  std::to_string(rank_) + " among " + std::to_string(size_));
    const int64_t es = static_cast<int64_t>(dtype_size(dtype));
    const auto* out = static_cast<const std::byte*>(send);
    auto* in = static_cast<std::byte*>(recv);
    const int64_t send_bytes = send_count * es, recv_bytes = recv_count * es;
    // Messages of at most kBroadcastBytes, as MPI counts are ints; both directions in flight together.
    for (int64_t o = 0; o < std::max(send_bytes, recv_bytes); o += kBroadcastBytes) {
      std::size_t r = 0;
      if (o < recv_bytes) post_recv(in + o, std::min(kBroadcastBytes, recv_bytes - o), peer, r);
      if (o < send_bytes) post_send(out + o, std::min(kBroadcastBytes, send_bytes - o), peer, r);
      wait_all(static_cast<int>(r));
    }
  }

  void barrier() override {
    operation_ = "barrier";
    meet();
  }

 protected:
  std::unique_ptr<Communicator> split_into_group(int color, int key) override {
    // MPI_Comm_split has no nonblocking form: the ranks meet first, within the time limit, so that the split
    // itself waits for no one.
    operation_ = "split";
    meet();
    MPI_Comm group = MPI_COMM_NULL;
    check(MPI_Comm_split(comm_, color, key, &group), "MPI_Comm_split");
    return std::make_unique<MpiCommunicator>(group, Releases::comm, timeout_);
  }

 private:
  int world_rank(int rank) const { return world_ranks_[static_cast<std::size_t>(rank)]; }
  std::string group_members() const {
    std::string members;
    for (const int r : world_ranks_) members += (members.empty() ? "" : ", ") + std::to_string(r);
    return members;
  }

  // Where peer p's contribution to this rank's chunk lands during a sum.
  std::byte* slot(int p) { return buffer_.data() + (p < rank_ ? p : p - 1) * kMpiRoundBytes; }

  void check_root(int root, const char* operation) const {
    if (root < 0 || root >= size_)
      throw std::invalid_argument(std::string(operation) + ": root " + std::to_string(root) + " of " +
                                  std::to_string(size_) + " ranks");
  }

  // Nonblocking send or receive of one message to or from a peer, as request r (then r + 1); wait_all
  // completes them.
  void post_send(const std::byte* data, int64_t bytes, int peer, std::size_t& r) {
    request_peers_[r] = peer;
    check(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, 0, comm_, &requests_[r++]), "MPI_Isend");
  }
  void post_recv(std::byte* data, int64_t bytes, int peer, std::size_t& r) {
    request_peers_[r] = peer;
    check(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, 0, comm_, &requests_[r++]), "MPI_Irecv");
  }

  // The root of a reduce: every peer's next `bytes` into its slot.
  void receive_round(int64_t bytes) {
    std::size_t r = 0;
    for (int p = 0; p < size_; ++p)
      if (p != rank_) post_recv(slot(p), bytes, p, r);
    wait_all(static_cast<int>(r));
  }

  // MPI_Waitall polls without pause, which on a machine with no spare core takes the core from the kernels
  // that the collective is meant to overlap. Poll, and after a while poll with pauses of kPollPause.
  // Past the time limit, the job ends (end_job_if_still_waiting).
  void wait_all(int count) {
    const auto start = std::chrono::steady_clock::now();
    for (int polls = 0;; ++polls) {
      int done = 0;
      check(MPI_Testall(count, requests_.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
      if (done) return;
      if (polls < kBusyPolls) continue;
      std::this_thread::sleep_for(kPollPause);
      if (timeout_ > 0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout_)
        return end_job_if_still_waiting(count);
    }
  }

  // Every rank of the group reaches this point (a nonblocking barrier, waited for as any exchange).
  void meet() {
    request_peers_[0] = kWholeGroup;
    check(MPI_Ibarrier(comm_, &requests_[0]), "MPI_Ibarrier");
    wait_all(1);
  }

  // Past the time limit: one line naming the exchange, this rank and host, and the world ranks it still waits
  // for; then the job ends. Aborting, rather than throwing, also ends the exchanges queued behind this one,
  // each of which would otherwise wait out its own time limit. Returns when nothing is pending any more (a
  // process stopped past the limit, then continued, finds its messages arrived).
  void end_job_if_still_waiting(int count) {
    std::string waited;
    for (int i = 0; i < count; ++i) {
      int done = 0;
      MPI_Test(&requests_[static_cast<std::size_t>(i)], &done, MPI_STATUS_IGNORE);
      const int peer = request_peers_[static_cast<std::size_t>(i)];
      const std::string name = peer == kWholeGroup
                                   ? "the ranks of its group (world ranks " + group_members() + ")"
                                   : "world rank " + std::to_string(world_rank(peer));
      if (!done && waited.find(name) == std::string::npos) waited += (waited.empty() ? "" : ", ") + name;
    }
    if (waited.empty()) return;
    std::ostringstream minutes;
    minutes << timeout_ / 60;
    print_error(std::string(operation_) + ": world rank " + std::to_string(world_rank(rank_)) + " on " +
                host_name() + " waited longer than --distributed-timeout-minutes " + minutes.str() + " for " +
                waited + " (a rank stopped, or the network between the hosts is down); ending the job");
    MPI_Abort(MPI_COMM_WORLD, static_cast<int>(ErrorKind::data));
    std::_Exit(static_cast<int>(ErrorKind::data));
  }

  // Sends send_of(p) to and receives recv_of(p) from every peer p, and waits for all of it.
  template <typename SendOf, typename RecvOf>
  void exchange(SendOf send_of, RecvOf recv_of) {
    std::size_t r = 0;
    // Receives are posted first so that sends find them; peers are visited from rank + 1 round, so that not
    // every rank sends to rank 0 first.
    for (int k = 1; k < size_; ++k) {
      const int p = (rank_ + k) % size_;
      const Piece piece = recv_of(p);
      post_recv(const_cast<std::byte*>(piece.data), piece.bytes, p, r);
    }
    for (int k = 1; k < size_; ++k) {
      const int p = (rank_ + k) % size_;
      const Piece piece = send_of(p);
      post_send(piece.data, piece.bytes, p, r);
    }
    wait_all(static_cast<int>(r));
  }

  // out[n] = the rank-order sum of this rank's own[n] and every peer's slot.
  void sum_round(const std::byte* own, std::byte* out, int64_t n, DType dtype) {
    for (int p = 0; p < size_; ++p) parts_[static_cast<std::size_t>(p)] = p == rank_ ? own : slot(p);
    sum_in_rank_order(parts_, out, n, dtype);
  }

  // A request that waits for the whole group (a barrier), not one peer.
  static constexpr int kWholeGroup = -1;

  MPI_Comm comm_;
  Releases releases_;
  double timeout_;              // seconds; 0: no limit
  const char* operation_ = "";  // the exchange under way, for the timeout's message
  std::vector<int> world_ranks_;
  int rank_ = 0;
  int size_ = 1;
  std::vector<std::byte> buffer_;
  std::vector<MPI_Request> requests_;
  std::vector<int> request_peers_;  // the peer of each request, or kWholeGroup
  std::vector<const void*> parts_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(double timeout_seconds) {
  initialise_mpi();
  return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, Releases::mpi, timeout_seconds);
}

}  // namespace mt
