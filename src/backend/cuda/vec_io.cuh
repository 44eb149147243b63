// 16-byte loads and stores of a row's values as fp32, for the element-wise kernels: one vector access where
// the row's width and start allow it (every tensor starts on 256 bytes), else one access per value; storage
// converted with core/half.h's exact widening and nearest-even rounding. Device code only.
#pragma once

#include <cstdint>

#include "core/half.h"

namespace mt::cuda {

// Values per 16-byte load or store of T.
template <typename T>
constexpr int kWide = static_cast<int>(16 / sizeof(T));

// out[k] = p[k] for k < kVec, as fp32: one 16-byte load when kVec is kWide<T> (p 16-byte aligned), else
// kVec scalar loads.
template <int kVec, typename T>
__device__ inline void load_f32(float (&out)[kVec], const T* p) {
  if constexpr (kVec == kWide<T>) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      if constexpr (sizeof(T) == 4)
        out[k] = __uint_as_float(w[k]);
      else
        out[k] = to_f32(T{static_cast<uint16_t>(w[k / 2] >> (k % 2 * 16))});
    }
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) out[k] = to_f32(p[k]);
  }
}

// p[k] = round_to<T>(in[k]) for k < kVec, the same way.
template <int kVec, typename T>
__device__ inline void store_f32(T* p, const float (&in)[kVec]) {
  if constexpr (kVec == kWide<T>) {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (sizeof(T) == 4)
        w[k] = __float_as_uint(in[k]);
      else
        w[k] = round_to<T>(in[2 * k]).bits | static_cast<uint32_t>(round_to<T>(in[2 * k + 1]).bits) << 16;
    }
    __stwb(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
  } else {
#pragma unroll
    for (int k = 0; k < kVec; ++k) p[k] = round_to<T>(in[k]);
  }
}

}  // namespace mt::cuda
