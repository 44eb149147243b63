// Collectives that overlap computation: every collective of an inner communicator runs on one worker
// thread, in the order the caller submitted them. Because every rank submits the same collectives in the
// same program order, the ranks still meet in each one in the same order, and the sums stay those of the
// inner communicator, bit for bit.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "dist/communicator.h"

namespace mt {

class AsyncCommunicator final : public Communicator {
 public:
  using Work = std::function<void(Communicator& inner)>;
  using Ticket = int64_t;  // submissions are numbered 1, 2, ...; 0 stands for none

  explicit AsyncCommunicator(std::unique_ptr<Communicator> inner);
  // Waits for the queued work, stops the worker, then destroys the inner communicator on this thread.
  ~AsyncCommunicator() override;

  // Queues work for the worker and returns at once. The buffers it uses must stay untouched until waited for.
  Ticket start(Work work);
  // Blocks until the work of `ticket` and everything before it is done, and rethrows the first failure of
  // that work not yet rethrown (an MPI error when a rank died, a bad argument).
  void wait(Ticket ticket);
  void wait_all();
  // Seconds the worker spent in collectives since the last call.
  double take_busy_seconds();

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
  void barrier() override;

 private:
  void run_worker();
  void call(Work work) { wait(start(std::move(work))); }

  std::unique_ptr<Communicator> inner_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Work> queue_;
  Ticket submitted_ = 0, done_ = 0;
  double busy_seconds_ = 0;
  std::map<Ticket, std::exception_ptr> failures_;  // not yet rethrown
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace mt
