// The instruction-set level (core/cpu_isa.h) this process runs the CPU kernels at. Every kernel with
// ISA-specific code is built once per level (backend/cpu/isa_variant.h); the active level is the highest this
// CPU supports, capped by MEMTRAIN_MAX_ISA, and is decided once, on first use.
#pragma once

#include "core/cpu_isa.h"

namespace mt::kernels {

// The highest level this CPU (and its operating system) supports.
CpuIsa cpu_isa_supported();

// The level the kernels run at: cpu_isa_supported(), lowered to MEMTRAIN_MAX_ISA when that is set, which then
// also caps oneDNN to the matching ISA (dnnl_set_max_cpu_isa) so the products and our kernels agree. A name
// that is not a level is a usage error naming the variable.
CpuIsa cpu_isa();

// Runs the kernels at `isa` from now on, for tests that compare levels; a usage error above
// cpu_isa_supported(). oneDNN keeps its cap.
void set_cpu_isa(CpuIsa isa);

// Whether oneDNN multiplies bf16 directly at this level: with AVX512-BF16's dot products. At plain AVX-512 it
// would emulate them at about a third of its fp32 rate, so there and below, bf16 products convert tiles to
// fp32 for sgemm, as f16 products always do (backend/cpu/matmul.h).
bool native_bf16_gemm(CpuIsa isa);

}  // namespace mt::kernels
