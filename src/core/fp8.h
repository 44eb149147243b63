// OCP FP8 E4M3 (the "OCP 8-bit Floating Point Specification", 2023): 1 sign, 4 exponent bits with bias 7,
// 3 mantissa bits; no infinities, NaN is S.1111.111 (0x7f, 0xff); largest magnitude 448 (S.1111.110),
// smallest 2^-9 (subnormal S.0000.001). Used to store Adam's moments in 8 bits (backend/cpu/block_quant.h).
#pragma once

#include <bit>
#include <cstdint>

#include "core/host_device.h"

namespace mt {

struct fp8_e4m3 {
  uint8_t bits;
};

constexpr float kE4m3Max = 448.0f;
constexpr uint8_t kE4m3Nan = 0x7f;

// Round to nearest, ties to even, then saturate: every finite value above 448 in magnitude, and infinity,
// becomes +-448 (OCP's saturating conversion; an optimizer state must not turn into NaN by overflow). NaN
// becomes 0x7f whatever its sign. -0 stays -0. Written without branches so that a loop over it vectorizes.
MT_HOST_DEVICE inline fp8_e4m3 round_to_e4m3(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  // Normal e4m3 (|x| >= 2^-6): keep 3 of fp32's 23 mantissa bits, nearest even, and rebias 127 -> 7; a carry
  // out of the mantissa correctly raises the exponent.
  const uint32_t normal = ((a + 0x7ffffu + ((a >> 20) & 1u)) >> 20) - (120u << 3);
  // Subnormal e4m3 (|x| < 2^-6): the number of 2^-9 steps, rounded by fp32 addition itself: in [2^14, 2^15)
  // fp32's spacing is 2^-9. 8 steps is 2^-6, which is also the encoding of the smallest normal.
  const uint32_t subnormal =
      std::bit_cast<uint32_t>(std::bit_cast<float>(a) + 16384.0f) - std::bit_cast<uint32_t>(16384.0f);
  uint32_t magnitude = a < 0x3c800000u ? subnormal : normal;  // 0x3c800000: 2^-6
  magnitude = a >= 0x43e00000u ? 0x7eu : magnitude;           // 0x43e00000: 448
  const uint32_t bits = a > 0x7f800000u ? kE4m3Nan : (sign | magnitude);
  return fp8_e4m3{static_cast<uint8_t>(bits)};
}

// Exact: every e4m3 value is an fp32 value. Subnormals are mantissa * 2^-9; normals are the exponent and
// mantissa fields moved into fp32's and rebiased (7 -> 127). Without branches, so that loops vectorize.
MT_HOST_DEVICE inline float to_f32(fp8_e4m3 x) {
  const uint32_t b = x.bits, exponent_mantissa = b & 0x7fu;
  const float normal = std::bit_cast<float>((exponent_mantissa << 20) + (120u << 23));
  const float subnormal = static_cast<float>(b & 0x7u) * 0x1p-9f;
  const float magnitude = (b & 0x78u) == 0 ? subnormal : normal;
  const float value = std::bit_cast<float>(std::bit_cast<uint32_t>(magnitude) | ((b & 0x80u) << 24));
  return exponent_mantissa == kE4m3Nan ? std::bit_cast<float>(0x7fc00000u) : value;
}

}  // namespace mt
