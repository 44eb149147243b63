// Device memory mapped through CUDA's virtual memory management (one physical allocation, one address range
// per buffer: exactly committed_bytes), and pinned host memory. The driver's functions are looked up
// through the runtime, so the binary does not link libcuda.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "backend/cuda/allocator.cuh"
#include "backend/cuda/cuda_check.h"

namespace mt::cuda {

namespace {

int64_t round_up(int64_t bytes, int64_t multiple) {
  return (std::max<int64_t>(bytes, 1) + multiple - 1) / multiple * multiple;
}

// The driver's virtual memory management, found once through the runtime.
struct DriverVmm {
  PFN_cuMemCreate_v10020 create = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 granularity = nullptr;
  PFN_cuMemAddressReserve_v10020 reserve = nullptr;
  PFN_cuMemMap_v10020 map = nullptr;
  PFN_cuMemSetAccess_v10020 set_access = nullptr;
  PFN_cuMemUnmap_v10020 unmap = nullptr;
  PFN_cuMemRelease_v10020 release = nullptr;
  PFN_cuMemAddressFree_v10020 address_free = nullptr;
};

template <typename F>
void find_entry_point(const char* symbol, F& function) {
  void* address = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  check(cudaGetDriverEntryPointByVersion(symbol, &address, 12000, cudaEnableDefault, &found),
        "device allocator", symbol);
  if (found != cudaDriverEntryPointSuccess || !address)
    throw std::runtime_error(std::string("cuda backend: device allocator: the driver has no ") + symbol);
  function = reinterpret_cast<F>(address);
}

const DriverVmm& driver_vmm() {
  static const DriverVmm vmm = [] {
    DriverVmm d;
    find_entry_point("cuMemCreate", d.create);
    find_entry_point("cuMemGetAllocationGranularity", d.granularity);
    find_entry_point("cuMemAddressReserve", d.reserve);
    find_entry_point("cuMemMap", d.map);
    find_entry_point("cuMemSetAccess", d.set_access);
    find_entry_point("cuMemUnmap", d.unmap);
    find_entry_point("cuMemRelease", d.release);
    find_entry_point("cuMemAddressFree", d.address_free);
    return d;
  }();
  return vmm;
}

void check_driver(CUresult status, const char* call) {
  if (status != CUDA_SUCCESS)
    throw std::runtime_error(std::string("cuda backend: device allocator: ") + call + ": CUresult " +
                             std::to_string(static_cast<int>(status)));
}

CUmemAllocationProp device_memory(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace

int64_t committed_bytes(int64_t requested) {
  return round_up(requested, kDeviceGranularity);
}

DeviceMemoryAllocator::DeviceMemoryAllocator(int device) : device_(device) {
  const CUmemAllocationProp prop = device_memory(device_);
  size_t minimum = 0;
  check_driver(driver_vmm().granularity(&minimum, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
               "cuMemGetAllocationGranularity");
  // Both are powers of two: the larger is a multiple of the smaller.
  granularity_ = std::max<int64_t>(kDeviceGranularity, static_cast<int64_t>(minimum));
}

DeviceMemoryAllocator::~DeviceMemoryAllocator() {
  // Buffers outlive no backend, but if one did, its memory goes back with the allocator.
  for (const auto& [data, mapping] : mappings_) unmap(data, mapping);
}

int64_t DeviceMemoryAllocator::rounded(int64_t bytes) const {
  return round_up(bytes, granularity_);
}

void* DeviceMemoryAllocator::allocate(int64_t bytes) {
  const DriverVmm& vmm = driver_vmm();
  const CUmemAllocationProp prop = device_memory(device_);
  const size_t size = static_cast<size_t>(rounded(bytes));
  MT_CUDA_CHECK("device allocator", cudaSetDevice(device_));  // the driver calls use the current context
  CUmemGenericAllocationHandle handle = 0;
  const CUresult created = vmm.create(&handle, size, &prop, 0);
  if (created == CUDA_ERROR_OUT_OF_MEMORY) throw std::bad_alloc();
  check_driver(created, "cuMemCreate");
  CUdeviceptr address = 0;
  CUresult status = vmm.reserve(&address, size, static_cast<size_t>(granularity_), 0, 0);
  if (status != CUDA_SUCCESS) {
    vmm.release(handle);
    check_driver(status, "cuMemAddressReserve");
  }
  status = vmm.map(address, size, 0, handle, 0);
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (status == CUDA_SUCCESS) status = vmm.set_access(address, size, &access, 1);
  void* data = reinterpret_cast<void*>(address);
  const Mapping mapping{.handle = handle, .bytes = static_cast<int64_t>(size)};
  if (status != CUDA_SUCCESS) {
    unmap(data, mapping);
    if (status == CUDA_ERROR_OUT_OF_MEMORY) throw std::bad_alloc();
    check_driver(status, "cuMemMap, cuMemSetAccess");
  }
  try {
    // Zero-filled, as every allocator's bytes are; done before the buffer is handed out.
    MT_CUDA_CHECK("device allocator", cudaMemset(data, 0, size));
    MT_CUDA_CHECK("device allocator", cudaDeviceSynchronize());
    const std::lock_guard lock(mutex_);
    mappings_.emplace(data, mapping);
  } catch (...) {
    unmap(data, mapping);
    throw;
  }
  return data;
}

void DeviceMemoryAllocator::unmap(void* data, const Mapping& mapping) {
  // Errors are ignored: this runs on failure paths and in destructors. Unmapping a range that was reserved
  // but never mapped fails harmlessly.
  const DriverVmm& vmm = driver_vmm();
  const CUdeviceptr address = reinterpret_cast<CUdeviceptr>(data);
  const size_t size = static_cast<size_t>(mapping.bytes);
  vmm.unmap(address, size);
  vmm.address_free(address, size);
  vmm.release(mapping.handle);
}

// Never throws: buffers are released by destructors. An error of the device shows at its next checked call.
void DeviceMemoryAllocator::release(void* data, int64_t /*bytes*/) {
  Mapping mapping{};
  {
    const std::lock_guard lock(mutex_);
    const auto it = mappings_.find(data);
    if (it == mappings_.end()) return;  // null, or not ours: nothing to give back
    mapping = it->second;
    mappings_.erase(it);
  }
  // Kernels still queued may read the buffer, and unmapping waits for nothing: wait here.
  cudaDeviceSynchronize();
  unmap(data, mapping);
}

void* PinnedHostAllocator::allocate(int64_t bytes) {
  void* data = nullptr;
  const size_t size = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  // Mapped: kernels may read and write it in place (with unified addressing, at the host's address).
  const cudaError_t status = cudaHostAlloc(&data, size, cudaHostAllocPortable | cudaHostAllocMapped);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clears the (non-sticky) error, so that later checks do not report it
    throw std::bad_alloc();
  }
  MT_CUDA_CHECK("pinned host allocator", status);
  std::memset(data, 0, size);
  return data;
}

void PinnedHostAllocator::release(void* data, int64_t /*bytes*/) {
  if (!data) return;
  cudaDeviceSynchronize();  // copies and kernels still queued may use it; errors ignored, as above
  cudaFreeHost(data);
}

}  // namespace mt::cuda
