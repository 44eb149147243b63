#include "memory/offloaded_state.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>

#include "core/error.h"

namespace mt {

namespace {

static_assert(kOffloadSlots == 2, "visit alternates between two slots");

// pread/pwrite until every byte moved: both may transfer less than asked.
void move_all(int fd, bool write, char* data, int64_t bytes, int64_t offset, const std::string& file) {
  while (bytes > 0) {
    const ssize_t n = write ? pwrite(fd, data, static_cast<size_t>(bytes), offset)
                            : pread(fd, data, static_cast<size_t>(bytes), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      fail_data("--offload-path: " + std::string(write ? "writing " : "reading ") + file + ": " +
                (n < 0 ? std::strerror(errno) : "unexpected end of file"));
    data += n;
    bytes -= n;
    offset += n;
  }
}

}  // namespace

OffloadedOptimizerState::OffloadedOptimizerState(const Plan& plan, const StateBuffers& slots)
    : plan_(plan), slots_(slots), moment_size_(static_cast<int64_t>(dtype_size(plan.policy.moments))) {
  const std::string& dir = plan.offload.path;
  struct stat st {};
  if (dir.empty()) fail_usage("--offload-optimizer nvme needs --offload-path DIR");
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    fail_data("--offload-path " + dir + ": not an existing directory");
  file_ = dir + "/memtrain-optimizer.rank" + std::to_string(plan.sharding.dp_rank) + ".bin";
  fd_ = open(file_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) fail_data("--offload-path " + dir + ": cannot create " + file_ + ": " + std::strerror(errno));
  // The lock tells a live run's file from one a killed run left behind (the kernel drops a dead process's
  // locks): the first is refused, the second taken over.
  if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    close(fd_);
    fail_data("--offload-path " + dir + ": " + file_ + " is in use by another run");
  }
  // Emptied, then sized as a sparse file, which reads as zeros: the moments' initial values.
  if (ftruncate(fd_, 0) != 0 || ftruncate(fd_, plan.offloaded_bytes) != 0) {
    const int err = errno;
    close(fd_);
    unlink(file_.c_str());
    fail_data("--offload-path " + dir + ": cannot size " + file_ + ": " + std::strerror(err));
  }
}

OffloadedOptimizerState::~OffloadedOptimizerState() {
  close(fd_);
  unlink(file_.c_str());
}

StateWindow OffloadedOptimizerState::window(int64_t begin, int64_t end, int slot) const {
  return slots_.window(plan_.policy, slot * plan_.offload.chunk_elems, begin, end);
}

void OffloadedOptimizerState::transfer(Direction direction, StateAccess access, int64_t begin, int64_t end,
                                       int slot) {
  // File layout: the shard's master weights (if any), then m, v, m's scales and v's scales (if blocked).
  const ModelStatePolicy& policy = plan_.policy;
  const int64_t shard = plan_.shard_elems, local = begin - plan_.shard_begin, n = end - begin;
  const int64_t master_bytes = slots_.master ? shard * 4 : 0;
  const StateWindow w = window(begin, end, slot);
  const bool write = direction == Direction::write;
  if (w.master) move_all(fd_, write, reinterpret_cast<char*>(w.master), n * 4, local * 4, file_);
  if (access == StateAccess::read_master || access == StateAccess::write_master) return;
  const int64_t moments = shard * moment_size_;
  move_all(fd_, write, static_cast<char*>(w.m), n * moment_size_, master_bytes + local * moment_size_, file_);
  move_all(fd_, write, static_cast<char*>(w.v), n * moment_size_,
           master_bytes + moments + local * moment_size_, file_);
  if (!policy.blocked_moments()) return;
  const int64_t scales_at = master_bytes + 2 * moments, shard_scales = policy.moment_scales(shard) * 4;
  const int64_t first = policy.moment_scales(local) * 4, count = policy.moment_scales(n) * 4;
  move_all(fd_, write, reinterpret_cast<char*>(w.m_scales), count, scales_at + first, file_);
  move_all(fd_, write, reinterpret_cast<char*>(w.v_scales), count, scales_at + shard_scales + first, file_);
}

void OffloadedOptimizerState::visit(int64_t begin, int64_t end, StateAccess access, const Visitor& visit) {
  check_in_shard(plan_, begin, end, access);
  if (begin >= end) return;
  const bool reads = access != StateAccess::write_master && access != StateAccess::write_all;
  const bool writes = access != StateAccess::read_master && access != StateAccess::read_all;
  const int64_t chunk = plan_.offload.chunk_elems, count = (end - begin + chunk - 1) / chunk;
  const auto chunk_begin = [&](int64_t i) { return begin + i * chunk; };
  const auto chunk_end = [&](int64_t i) { return std::min(end, begin + (i + 1) * chunk); };
  if (reads) transfer(Direction::read, access, chunk_begin(0), chunk_end(0), 0);
  for (int64_t i = 0; i < count; ++i) {
    const int slot = static_cast<int>(i % kOffloadSlots), other = 1 - slot;
    // The other slot holds chunk i - 1: written back, then refilled with chunk i + 1, while i is visited.
    std::future<void> io = std::async(std::launch::async, [&, i, other] {
      if (writes && i > 0) transfer(Direction::write, access, chunk_begin(i - 1), chunk_end(i - 1), other);
      if (reads && i + 1 < count)
        transfer(Direction::read, access, chunk_begin(i + 1), chunk_end(i + 1), other);
    });
    visit(window(chunk_begin(i), chunk_end(i), slot));
    io.get();
  }
  if (writes)
    transfer(Direction::write, access, chunk_begin(count - 1), chunk_end(count - 1),
             static_cast<int>((count - 1) % kOffloadSlots));
}

}  // namespace mt
