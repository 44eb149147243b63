// Collectives that overlap computation: every collective of an inner communicator runs on one worker
// thread, in the order the caller submitted them. Because every rank submits the same collectives in the
// same program order, the ranks still meet in each one in the same order, and the sums stay those of the
// inner communicator, bit for bit.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "dist/communicator.h"

namespace mt {

// The root AsyncCommunicator owns the worker thread and its queue; the groups split from it (split) share
// them, so that every MPI call of every group runs on that one thread in submission order, as MPI's
// MPI_THREAD_SERIALIZED level asks. The root must outlive its groups.
class AsyncCommunicator final : public Communicator {
 public:
  using Work = std::function<void(Communicator& inner)>;
  using Ticket = int64_t;  // submissions to the shared queue are numbered 1, 2, ...; 0 stands for none

  // The root, with a worker of its own.
  explicit AsyncCommunicator(std::unique_ptr<Communicator> inner);
  // Waits for the queued work (of every facade on the queue); the root then stops the worker. The inner
  // communicator is destroyed on this thread, while the worker idles.
  ~AsyncCommunicator() override;

  // Queues work(this facade's inner communicator) and returns at once. The buffers it uses must stay
  // untouched until waited for.
  Ticket start(Work work);
  // Blocks until the work of `ticket` and everything queued before it, by any facade, is done, and
  // rethrows the first failure of that work not yet rethrown (an MPI error when a rank died, a bad
  // argument), whichever facade queued it.
  void wait(Ticket ticket);
  void wait_all();
  // Seconds the shared worker spent in work since the last call on any facade: a group's is not its own.
  double take_busy_seconds();
  // Seconds this facade's caller spent blocked in its Communicator calls (below) since the last call: the
  // exchanges nothing overlapped. One caller thread only.
  double take_blocked_seconds();

  // Collective, run on the worker: the group of Communicator::split, as a facade on this one's queue.
  std::unique_ptr<AsyncCommunicator> split(int color, int key);

  // The Communicator calls each start one collective and wait for it.
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string backend() const override { return inner_->backend(); }
  int64_t buffer_bytes() const override { return inner_->buffer_bytes(); }
  void all_reduce_sum(void* data, int64_t count, DType dtype) override;
  void reduce_scatter_sum(const void* send, void* recv, int64_t count, DType dtype) override;
  void reduce_sum(const void* send, void* recv, int64_t count, DType dtype, int root) override;
  void all_gather(const void* send, void* recv, int64_t count, DType dtype) override;
  void broadcast(void* data, int64_t count, DType dtype, int root) override;
  void send_recv(const void* send, int64_t send_count, void* recv, int64_t recv_count, DType dtype,
                 int peer) override;
  void barrier() override;

 protected:
  std::unique_ptr<Communicator> split_into_group(int color, int key) override { return split(color, key); }

 private:
  class Worker;  // the thread, its queue, the tickets and the failures not yet rethrown

  // A group: a facade on `worker`.
  AsyncCommunicator(std::unique_ptr<Communicator> inner, Worker& worker);
  void call(Work work);

  std::unique_ptr<Communicator> inner_;
  std::unique_ptr<Worker> own_worker_;  // the root's; null in a group
  Worker& worker_;                      // *own_worker_, or the root's
  double blocked_seconds_ = 0;          // in call(), since take_blocked_seconds
};

}  // namespace mt
