#include "backend_ops_guard.h"

#include <array>
#include <cstring>

namespace mt::backend_ops {

namespace {

// No run of equal bytes, and neither zero nor an all-ones NaN byte: a kernel writing zeros, NaN or one value
// over it cannot leave it as it was.
const std::array<char, GuardAllocator::kGuardBytes>& guard_pattern() {
  static const auto pattern = [] {
    std::array<char, GuardAllocator::kGuardBytes> p{};
    for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<char>(0x5a + 37 * i);
    return p;
  }();
  return pattern;
}

}  // namespace

void* GuardAllocator::allocate(int64_t bytes) {
  char* base = static_cast<char*>(inner_.allocate(bytes + 2 * kGuardBytes));
  char* data = base + kGuardBytes;
  write_guards(data, bytes);
  blocks_[data] = {bytes, "a block of " + std::to_string(bytes) + " bytes"};
  return data;
}

void GuardAllocator::release(void* data, int64_t bytes) {
  char* at = static_cast<char*>(data);
  const auto block = blocks_.find(at);
  if (block == blocks_.end() || block->second.bytes != bytes) {
    problems_.push_back("released a block the guard allocator did not hand out, or with another size");
    return;  // not ours to give back
  }
  if (std::string broken = broken_guard(at, block->second); !broken.empty())
    problems_.push_back(broken + ", found when it was released");
  blocks_.erase(block);
  inner_.release(at - kGuardBytes, bytes + 2 * kGuardBytes);
}

void GuardAllocator::label(const void* data, std::string name) {
  if (const auto block = blocks_.find(static_cast<const char*>(data)); block != blocks_.end())
    block->second.label = std::move(name);
}

void GuardAllocator::check(const std::string& when) {
  for (auto& [data, block] : blocks_) {
    if (std::string broken = broken_guard(data, block); !broken.empty()) {
      problems_.push_back(broken + ", " + when);
      write_guards(const_cast<char*>(data), block.bytes);
    }
  }
}

void GuardAllocator::write_guards(char* data, int64_t bytes) {
  device_.copy_from_host(data - kGuardBytes, guard_pattern().data(), kGuardBytes);
  device_.copy_from_host(data + bytes, guard_pattern().data(), kGuardBytes);
}

std::string GuardAllocator::broken_guard(const char* data, const Block& block) {
  std::array<char, kGuardBytes> seen;
  for (const auto& [at, side] :
       {std::pair{data - kGuardBytes, "before"}, std::pair{data + block.bytes, "after"}}) {
    device_.copy_to_host(seen.data(), at, kGuardBytes);
    if (std::memcmp(seen.data(), guard_pattern().data(), kGuardBytes) == 0) continue;
    int64_t first = 0;
    while (seen[static_cast<size_t>(first)] == guard_pattern()[static_cast<size_t>(first)]) ++first;
    return std::string("guard bytes ") + side + " " + block.label + " overwritten (byte " +
           std::to_string(first) + " of the guard)";
  }
  return {};
}

void GuardedBackend::run(const Op& op, const OpRun& run) {
  inner_.run(op, run);
  check("after op " + op.name);
}

void GuardedBackend::logits(const Op& head, const OpRun& run, float* host_out) {
  inner_.logits(head, run, host_out);
  check("after the logits of " + head.name);
}

void GuardedBackend::label(const Allocation& memory) {
  const TensorTable& table = memory.table();
  for (int id = 0; id < table.size(); ++id) {
    if (table[id].category == Category::params) continue;  // in the flat buffers
    device_.label(memory.data(id), table[id].name);
    host_.label(memory.data(id), table[id].name);
  }
  device_.label(memory.params(), "the flat weights");
  device_.label(memory.grads(), "the flat gradients");
}

void GuardedBackend::check(const std::string& when) {
  device_.check(when);
  host_.check(when);
}

}  // namespace mt::backend_ops
