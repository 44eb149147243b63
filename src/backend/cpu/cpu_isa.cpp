#include "backend/cpu/cpu_isa.h"

#include <oneapi/dnnl/dnnl.h>

#include <atomic>
#include <cstdlib>

#include "core/error.h"

namespace mt::kernels {

namespace {

CpuIsa detect() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("x86-64-v3")) return CpuIsa::generic;
  if (!__builtin_cpu_supports("x86-64-v4")) return CpuIsa::avx2;
  return __builtin_cpu_supports("avx512bf16") ? CpuIsa::avx512_bf16 : CpuIsa::avx512;
#else
  return CpuIsa::generic;
#endif
}

#if defined(__x86_64__)
// oneDNN's ISA of the same instructions as each level.
dnnl_cpu_isa_t onednn_isa(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::generic:
      return dnnl_cpu_isa_sse41;
    case CpuIsa::avx2:
      return dnnl_cpu_isa_avx2;
    case CpuIsa::avx512:
      return dnnl_cpu_isa_avx512_core;
    case CpuIsa::avx512_bf16:
      return dnnl_cpu_isa_avx512_core_bf16;
  }
  return dnnl_cpu_isa_all;
}
#endif

CpuIsa decide() {
  CpuIsa isa = cpu_isa_supported();
  if (const char* cap = std::getenv("MEMTRAIN_MAX_ISA"); cap && *cap) {
    const std::optional<CpuIsa> level = parse_cpu_isa(cap);
    if (!level)
      fail_usage("MEMTRAIN_MAX_ISA: expected " + cpu_isa_choices() + ", got '" + std::string(cap) + "'");
    if (*level < isa) isa = *level;
#if defined(__x86_64__)
    // Before any primitive exists, so it holds for every product of the run.
    dnnl_set_max_cpu_isa(onednn_isa(isa));
#endif
  }
  return isa;
}

std::atomic<int>& active() {
  static std::atomic<int> level{static_cast<int>(decide())};
  return level;
}

}  // namespace

CpuIsa cpu_isa_supported() {
  static const CpuIsa supported = detect();
  return supported;
}

CpuIsa cpu_isa() {
  return static_cast<CpuIsa>(active().load(std::memory_order_relaxed));
}

void set_cpu_isa(CpuIsa isa) {
  if (isa > cpu_isa_supported())
    fail_usage("cpu isa " + std::string(cpu_isa_name(isa)) + " is above this CPU's " +
               std::string(cpu_isa_name(cpu_isa_supported())));
  active().store(static_cast<int>(isa), std::memory_order_relaxed);
}

bool native_bf16_gemm(CpuIsa isa) {
  return isa >= CpuIsa::avx512_bf16;
}

}  // namespace mt::kernels
