#include "backend/cpu/cpu_device.h"

#include <omp.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "backend/cpu/adam_mini.h"
#include "backend/cpu/adamw.h"
#include "backend/cpu/adamw_8bit.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/convert.h"
#include "backend/cpu/cpu_isa.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/weight_quant.h"
#include "core/storage_type.h"

namespace mt {

namespace {

class HostAllocator final : public DeviceAllocator {
 public:
  std::string_view name() const override { return "host"; }
  void* allocate(int64_t bytes) override {
    void* data = std::aligned_alloc(kCpuAlignment, static_cast<size_t>(arena_aligned(bytes, kCpuAlignment)));
    if (!data) throw std::bad_alloc();
    std::memset(data, 0, static_cast<size_t>(bytes));
    return data;
  }
  void release(void* data, int64_t /*bytes*/) override { std::free(data); }
};

// Dispatches on a dtype's storage type, naming this device in its error.
template <bool kF16 = true, typename F>
void with_type(DType dtype, const char* what, F f) {
  with_storage_type<kF16>(dtype, "cpu device", what, f);
}

}  // namespace

DeviceAllocator& cpu_allocator() {
  static HostAllocator host;
  return host;
}

CpuDevice::CpuDevice(const CpuTarget& target) : target_(target) {}

DeviceDescription CpuDevice::description() const {
  const std::string isa(cpu_isa_name(target_.isa));
  return {.name = "cpu",
          .banner = std::to_string(target_.threads) + " threads | cpu " + isa + " | matmul " +
                    std::string(kernels::gemm_backend_name(kernels::gemm_backend())),
          .fields = {{"cpu_isa", isa}}};
}

DeviceAllocator& CpuDevice::allocator(MemorySpace /*space*/) {
  return cpu_allocator();  // the CPU's memory is the host's
}

void CpuDevice::zero(void* dst, int64_t bytes) {
  std::memset(dst, 0, static_cast<size_t>(bytes));
}

void CpuDevice::copy(void* dst, const void* src, int64_t bytes) {
  std::memcpy(dst, src, static_cast<size_t>(bytes));
}

void CpuDevice::copy_from_host(void* dst, const void* host, int64_t bytes) {
  std::memcpy(dst, host, static_cast<size_t>(bytes));
}

void CpuDevice::copy_to_host(void* host, const void* src, int64_t bytes) {
  std::memcpy(host, src, static_cast<size_t>(bytes));
}

void CpuDevice::read(const void* src, int64_t bytes, const HostReader& read) {
  if (bytes > 0) read(static_cast<const char*>(src), 0, bytes);
}

void CpuDevice::write(void* dst, int64_t bytes, const HostWriter& write) {
  if (bytes > 0) write(static_cast<char*>(dst), 0, bytes);
}

void CpuDevice::convert(void* dst, DType to, const void* src, DType from, int64_t n) {
  with_type(to, "convert into", [&](auto to_type) {
    using To = typename decltype(to_type)::type;
    with_type(from, "convert from", [&](auto from_type) {
      using From = typename decltype(from_type)::type;
      if constexpr (std::is_same_v<To, float> || std::is_same_v<From, float>)
        kernels::convert(static_cast<To*>(dst), static_cast<const From*>(src), n);
      else
        throw std::logic_error("cpu device: convert between two 16-bit types");
    });
  });
}

double CpuDevice::sum_of_squares(const void* x, DType dtype, int64_t n) {
  double sum = 0;
  with_type<false>(dtype, "sum of squares over", [&](auto type) {
    using G = typename decltype(type)::type;
    sum = kernels::sum_of_squares(static_cast<const G*>(x), n);
  });
  return sum;
}

void CpuDevice::adamw_update(const AdamWOperands& p, void* m, void* v, DType moments, const AdamWStep& step,
                             const AdamWRounding& rounding) {
  with_type(p.weights_dtype, "AdamW over weights", [&](auto weights) {
    using P = typename decltype(weights)::type;
    with_type<false>(p.grads_dtype, "AdamW over gradients", [&](auto grads) {
      using G = typename decltype(grads)::type;
      with_type<false>(moments, "AdamW over moments", [&](auto moment) {
        using M = typename decltype(moment)::type;
        kernels::adamw_update(p.master, static_cast<P*>(p.weights), static_cast<const G*>(p.grads),
                              static_cast<M*>(m), static_cast<M*>(v), p.n, step, rounding);
      });
    });
  });
}

void CpuDevice::adam_mini_second_moments(const void* grads, DType grads_dtype, float* v,
                                         const MiniBlockLayout& blocks, const AdamWStep& step) {
  with_type<false>(grads_dtype, "Adam-mini's second moments over gradients", [&](auto grad) {
    using G = typename decltype(grad)::type;
    kernels::adam_mini_second_moments(static_cast<const G*>(grads), v, blocks, step);
  });
}

void CpuDevice::adam_mini_block_squares(const void* grads, DType grads_dtype, const MiniBlockLayout& blocks,
                                        int64_t first, int64_t n, float grad_multiplier, double* sums) {
  with_type<false>(grads_dtype, "Adam-mini's sums of squares over gradients", [&](auto grad) {
    using G = typename decltype(grad)::type;
    kernels::adam_mini_block_squares(static_cast<const G*>(grads), blocks, first, n, grad_multiplier, sums);
  });
}

void CpuDevice::adam_mini_second_moments_from_sums(float* v, const double* sums,
                                                   const MiniBlockLayout& blocks, const AdamWStep& step) {
  kernels::adam_mini_second_moments_from_sums(v, sums, blocks, step);
}

void CpuDevice::adam_mini_update(const AdamWOperands& p, void* m, DType moments, const float* v,
                                 const MiniBlockLayout& blocks, int64_t first, const AdamWStep& step,
                                 const AdamWRounding& rounding) {
  with_type(p.weights_dtype, "Adam-mini over weights", [&](auto weights) {
    using P = typename decltype(weights)::type;
    with_type<false>(p.grads_dtype, "Adam-mini over gradients", [&](auto grads) {
      using G = typename decltype(grads)::type;
      with_type<false>(moments, "Adam-mini over moments", [&](auto moment) {
        using M = typename decltype(moment)::type;
        kernels::adam_mini_update(p.master, static_cast<P*>(p.weights), static_cast<const G*>(p.grads),
                                  static_cast<M*>(m), v, blocks, first, p.n, step, rounding);
      });
    });
  });
}

void CpuDevice::adam_mini_update_blocked(const AdamWOperands& p, MomentFormat format, uint8_t* m,
                                         float* m_scales, std::span<const MiniTensor> tensors,
                                         const AdamWStep& step, const AdamWRounding& rounding) {
  with_type(p.weights_dtype, "Adam-mini over weights", [&](auto weights) {
    using P = typename decltype(weights)::type;
    with_type<false>(p.grads_dtype, "Adam-mini over gradients", [&](auto grads) {
      using G = typename decltype(grads)::type;
      kernels::adam_mini_update_8bit(p.master, static_cast<P*>(p.weights), static_cast<const G*>(p.grads),
                                     format, m, m_scales, p.n, tensors, step, rounding);
    });
  });
}

void CpuDevice::adamw_update_blocked(const AdamWOperands& p, const QuantizedMoments& moments,
                                     const AdamWStep& step, std::span<const DecayRun> runs,
                                     const AdamWRounding& rounding) {
  with_type(p.weights_dtype, "AdamW over weights", [&](auto weights) {
    using P = typename decltype(weights)::type;
    with_type<false>(p.grads_dtype, "AdamW over gradients", [&](auto grads) {
      using G = typename decltype(grads)::type;
      kernels::adamw_update_8bit(p.master, static_cast<P*>(p.weights), static_cast<const G*>(p.grads),
                                 moments, p.n, step, runs, rounding);
    });
  });
}

void CpuDevice::quantize_weight(const float* host_values, const QuantizedWeight& into) {
  kernels::quantize_weight(host_values, into);
}

void CpuDevice::begin_pass(const Graph& /*graph*/) {
  // Kernels index their scratch by OpenMP thread number: more threads than planned would write past it.
  if (omp_get_max_threads() > target_.threads)
    throw std::logic_error("cpu backend: the plan sized kernel scratch for " +
                           std::to_string(target_.threads) + " threads, but OpenMP runs " +
                           std::to_string(omp_get_max_threads()));
}

}  // namespace mt

namespace mt {

CpuIsa init_cpu_backend() {
  return kernels::cpu_isa();
}

int cpu_default_threads() {
  return omp_get_max_threads();
}

CpuTarget open_cpu_backend(int threads) {
  omp_set_num_threads(threads);
  return {.isa = kernels::cpu_isa(), .threads = threads};
}

DeviceTraits cpu_device_traits(const CpuTarget& target, DType dtype, int64_t seq_len, int64_t head_dim) {
  return {
      .alignment = kCpuAlignment,
      .host_memory = true,
      .matmul_scratch_floats = kernels::gemm_scratch_floats(dtype, target.isa, target.threads),
      .attention_scratch_floats = kernels::attention_scratch_floats(seq_len, head_dim, target.threads, dtype),
      .dequant_tile_columns = kernels::kQuantizedTileColumns};
}

}  // namespace mt
