// The instruction-set levels the CPU backend's kernels are compiled for, by name: what a plan, a hardware
// profile or a metrics line says it was made for. Detecting and choosing the level this process runs at is
// the CPU backend's own (backend/cpu/cpu_isa.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace mt {

// In increasing order; each level's build may use everything of the levels below it.
//   generic      x86-64-v2 (SSE4.2) on x86-64, the baseline of other processors (aarch64: NEON)
//   avx2         x86-64-v3: AVX2, FMA, F16C, BMI2
//   avx512       x86-64-v4: AVX-512 F, BW, CD, DQ, VL
//   avx512_bf16  x86-64-v4 and AVX512-BF16
enum class CpuIsa { generic, avx2, avx512, avx512_bf16 };
constexpr int kNumCpuIsas = 4;

std::string_view cpu_isa_name(CpuIsa isa);
std::optional<CpuIsa> parse_cpu_isa(std::string_view name);
// "generic, avx2, avx512 or avx512_bf16", for messages.
std::string cpu_isa_choices();

}  // namespace mt
