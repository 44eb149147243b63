#include "dist/async_communicator.h"

#include <chrono>

namespace mt {

AsyncCommunicator::AsyncCommunicator(std::unique_ptr<Communicator> inner)
    : inner_(std::move(inner)), worker_([this] { run_worker(); }) {}

AsyncCommunicator::~AsyncCommunicator() {
  {
    std::unique_lock lock(mutex_);
    // Queued collectives are part of the run: they finish (or fail) before the worker stops.
    changed_.wait(lock, [&] { return done_ == submitted_; });
    stopping_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

AsyncCommunicator::Ticket AsyncCommunicator::start(Work work) {
  Ticket ticket;
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(std::move(work));
    ticket = ++submitted_;
  }
  changed_.notify_all();
  return ticket;
}

void AsyncCommunicator::wait(Ticket ticket) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return done_ >= ticket; });
  const auto first = failures_.begin();
  if (first == failures_.end() || first->first > ticket) return;
  const std::exception_ptr failure = first->second;
  failures_.erase(first);
  std::rethrow_exception(failure);
}

void AsyncCommunicator::wait_all() {
  Ticket last;
  {
    std::lock_guard lock(mutex_);
    last = submitted_;
  }
  wait(last);
}

double AsyncCommunicator::take_busy_seconds() {
  std::lock_guard lock(mutex_);
  const double seconds = busy_seconds_;
  busy_seconds_ = 0;
  return seconds;
}

void AsyncCommunicator::run_worker() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (stopping_) return;
    Work work = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    std::exception_ptr failure;
    const auto start = std::chrono::steady_clock::now();
    try {
      work(*inner_);
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

void AsyncCommunicator::barrier() {
  call([](Communicator& c) { c.barrier(); });
}

}  // namespace mt
