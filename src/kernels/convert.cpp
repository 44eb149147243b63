#include "kernels/convert.h"

namespace mt::kernels {

template <typename To, typename From>
void convert(To* dst, const From* src, int64_t n) {
#pragma omp parallel for simd
  for (int64_t i = 0; i < n; ++i) dst[i] = round_to<To>(to_f32(src[i]));
}

template void convert<float, bf16>(float*, const bf16*, int64_t);
template void convert<float, f16>(float*, const f16*, int64_t);
template void convert<bf16, float>(bf16*, const float*, int64_t);
template void convert<f16, float>(f16*, const float*, int64_t);
template void convert<float, float>(float*, const float*, int64_t);

}  // namespace mt::kernels
