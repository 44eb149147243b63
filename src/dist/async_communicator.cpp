#include "dist/async_communicator.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

namespace mt {

class AsyncCommunicator::Worker {
 public:
  Worker() : thread_([this] { run(); }) {}

  ~Worker() {
    {
      std::unique_lock lock(mutex_);
      // Queued collectives are part of the run: they finish (or fail) before the worker stops.
      changed_.wait(lock, [&] { return done_ == submitted_; });
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  Ticket start(Communicator& inner, Work work) {
    Ticket ticket;
    {
      std::lock_guard lock(mutex_);
      queue_.push_back({&inner, std::move(work)});
      ticket = ++submitted_;
    }
    changed_.notify_all();
    return ticket;
  }

  void wait(Ticket ticket) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return done_ >= ticket; });
    const auto first = failures_.begin();
    if (first == failures_.end() || first->first > ticket) return;
    const std::exception_ptr failure = first->second;
    failures_.erase(first);
    std::rethrow_exception(failure);
  }

  Ticket last_submitted() {
    std::lock_guard lock(mutex_);
    return submitted_;
  }

  // Waits for everything queued so far, leaving its failures to the waits that cover them.
  void drain() {
    std::unique_lock lock(mutex_);
    const Ticket last = submitted_;
    changed_.wait(lock, [&] { return done_ >= last; });
  }

  double take_busy_seconds() {
    std::lock_guard lock(mutex_);
    const double seconds = busy_seconds_;
    busy_seconds_ = 0;
    return seconds;
  }

 private:
  struct Job {
    Communicator* inner;
    Work work;
  };

  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      Job job = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      std::exception_ptr failure;
      const auto start = std::chrono::steady_clock::now();
      try {
        job.work(*job.inner);
      } catch (...) {
        failure = std::current_exception();
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      lock.lock();
      busy_seconds_ += seconds;
      ++done_;
      if (failure) failures_[done_] = failure;
      changed_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> queue_;
  Ticket submitted_ = 0, done_ = 0;
  double busy_seconds_ = 0;
  std::map<Ticket, std::exception_ptr> failures_;  // not yet rethrown
  bool stopping_ = false;
  std::thread thread_;
};

AsyncCommunicator::AsyncCommunicator(std::unique_ptr<Communicator> inner)
    : inner_(std::move(inner)), own_worker_(std::make_unique<Worker>()), worker_(*own_worker_) {}

AsyncCommunicator::AsyncCommunicator(std::unique_ptr<Communicator> inner, Worker& worker)
    : inner_(std::move(inner)), worker_(worker) {}

AsyncCommunicator::~AsyncCommunicator() {
  // The root's worker stops in own_worker_'s destructor, before inner_ goes; a group's work on inner_ must be
  // done before it goes.
  if (!own_worker_) worker_.drain();
}

AsyncCommunicator::Ticket AsyncCommunicator::start(Work work) {
  return worker_.start(*inner_, std::move(work));
}

void AsyncCommunicator::wait(Ticket ticket) {
  worker_.wait(ticket);
}

void AsyncCommunicator::wait_all() {
  worker_.wait(worker_.last_submitted());
}

double AsyncCommunicator::take_busy_seconds() {
  return worker_.take_busy_seconds();
}

std::unique_ptr<AsyncCommunicator> AsyncCommunicator::split(int color, int key) {
  std::unique_ptr<Communicator> group;
  call([&](Communicator& c) { group = c.split(color, key); });
  return std::unique_ptr<AsyncCommunicator>(new AsyncCommunicator(std::move(group), worker_));
}

void AsyncCommunicator::call(Work work) {
  const auto begin = std::chrono::steady_clock::now();
  wait(start(std::move(work)));
  blocked_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

double AsyncCommunicator::take_blocked_seconds() {
  const double seconds = blocked_seconds_;
  blocked_seconds_ = 0;
  return seconds;
}

void AsyncCommunicator::all_reduce_sum(void* data, int64_t count, DType dtype) {
  call([=](Communicator& c) { c.all_reduce_sum(data, count, dtype); });
}

void AsyncCommunicator::reduce_scatter_sum(const void* send, void* recv, int64_t count, DType dtype) {
  call([=](Communicator& c) { c.reduce_scatter_sum(send, recv, count, dtype); });
}

void AsyncCommunicator::reduce_sum(const void* send, void* recv, int64_t count, DType dtype, int root) {
  call([=](Communicator& c) { c.reduce_sum(send, recv, count, dtype, root); });
}

void AsyncCommunicator::all_gather(const void* send, void* recv, int64_t count, DType dtype) {
  call([=](Communicator& c) { c.all_gather(send, recv, count, dtype); });
}

void AsyncCommunicator::broadcast(void* data, int64_t count, DType dtype, int root) {
  call([=](Communicator& c) { c.broadcast(data, count, dtype, root); });
}

void AsyncCommunicator::send_recv(const void* send, int64_t send_count, void* recv, int64_t recv_count,
                                  DType dtype, int peer) {
  call([=](Communicator& c) { c.send_recv(send, send_count, recv, recv_count, dtype, peer); });
}

void AsyncCommunicator::barrier() {
  call([](Communicator& c) { c.barrier(); });
}

}  // namespace mt
