// The CUDA backend's two memory spaces as DeviceAllocators (memory/device_allocator.h): device memory, one
// physical allocation per planned buffer through CUDA's virtual memory management (so that what the driver
// commits is known exactly), and pinned host memory (cudaHostAlloc), which the GPU's copies reach directly.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string_view>

#include "memory/device_allocator.h"

namespace mt::cuda {

// Every device allocation is a multiple of this: the minimum granularity of cuMemCreate for pinned device
// memory, 2 MiB on every NVIDIA GPU so far (Pascal to Blackwell). A plain cudaMalloc would commit 2 MiB
// pages for large allocations but pack small ones into shared 2 MiB blocks, which no formula states; so the
// device allocator maps its own physical allocations instead and commits exactly committed_bytes.
constexpr int64_t kDeviceGranularity = int64_t{2} << 20;

// What the device allocator commits for allocate(requested): requested (at least 1) rounded up to
// kDeviceGranularity. Should a GPU report a larger minimum granularity, the allocator rounds to that instead
// and this undercounts.
int64_t committed_bytes(int64_t requested);

// Device memory of GPU `device` (the caller's current device), zero-filled; std::bad_alloc when the GPU has
// no more. Driver entry points come through the runtime (cudaGetDriverEntryPointByVersion): the binary does
// not link libcuda, and loads on a machine without a driver.
class DeviceMemoryAllocator final : public DeviceAllocator {
 public:
  explicit DeviceMemoryAllocator(int device);
  ~DeviceMemoryAllocator() override;
  DeviceMemoryAllocator(const DeviceMemoryAllocator&) = delete;
  DeviceMemoryAllocator& operator=(const DeviceMemoryAllocator&) = delete;

  std::string_view name() const override { return "cuda"; }
  void* allocate(int64_t bytes) override;
  void release(void* data, int64_t bytes) override;
  // What allocate(bytes) maps: committed_bytes(bytes), unless the GPU's granularity is coarser.
  int64_t committed(int64_t bytes) const override { return rounded(bytes); }

 private:
  struct Mapping {
    unsigned long long handle;  // CUmemGenericAllocationHandle
    int64_t bytes;              // mapped and reserved
  };
  int64_t rounded(int64_t bytes) const;
  void unmap(void* data, const Mapping& mapping);

  const int device_;
  int64_t granularity_ = kDeviceGranularity;
  std::mutex mutex_;
  std::map<void*, Mapping> mappings_;  // every live allocation: its physical handle
};

// Pinned (page-locked) host memory, zero-filled: the host memory space of a CUDA run, and the staging
// buffers of the device's reads and writes.
class PinnedHostAllocator final : public DeviceAllocator {
 public:
  std::string_view name() const override { return "cuda_host"; }
  void* allocate(int64_t bytes) override;
  void release(void* data, int64_t bytes) override;
};

}  // namespace mt::cuda
