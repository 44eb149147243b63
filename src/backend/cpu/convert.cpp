#include "backend/cpu/convert.h"

#include <algorithm>
#include <type_traits>

#include "backend/cpu/isa_variant.h"
#include "backend/cpu/typed_io.h"

namespace mt::kernels {

namespace MT_ISA {

// Values per task: whole vectors of every level's conversion instructions.
constexpr int64_t kChunk = 4096;

template <typename To, typename From>
void convert(To* dst, const From* src, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    if constexpr (std::is_same_v<To, From>)
      std::copy_n(src + i, len, dst + i);
    else
      convert_n(dst + i, src + i, len);
  }
}

}  // namespace MT_ISA

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
template <typename To, typename From>
void convert(To* dst, const From* src, int64_t n) {
  dispatch<&convert<To, From>>(dst, src, n);
}

template void convert<float, bf16>(float*, const bf16*, int64_t);
template void convert<float, f16>(float*, const f16*, int64_t);
template void convert<bf16, float>(bf16*, const float*, int64_t);
template void convert<f16, float>(f16*, const float*, int64_t);
template void convert<float, float>(float*, const float*, int64_t);
#endif

namespace MT_ISA {
// Enrolled at start-up; the helpers are this file's own (other files have their namesakes).
namespace {
const bool enrolled =
    enroll<&kernels::convert<float, bf16>>(convert) && enroll<&kernels::convert<float, f16>>(convert) &&
    enroll<&kernels::convert<bf16, float>>(convert) && enroll<&kernels::convert<f16, float>>(convert) &&
    enroll<&kernels::convert<float, float>>(convert);
}  // namespace
}  // namespace MT_ISA

}  // namespace mt::kernels
