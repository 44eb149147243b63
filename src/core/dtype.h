// Element types of tensors, as the memory plan counts them and as files name them.
#pragma once

#include <cstddef>
#include <string_view>

namespace mt {

// u8 and f8_e4m3 hold block-quantized Adam moments (backend/cpu/block_quant.h): dynamic-map codes and e4m3.
enum class DType { f32, bf16, f16, i32, u16, f64, u8, f8_e4m3 };

constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64:
      return 8;
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::bf16:
    case DType::f16:
    case DType::u16:
      return 2;
    case DType::u8:
    case DType::f8_e4m3:
      return 1;
  }
  return 0;
}

// Names as the safetensors format spells them.
constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::bf16:
      return "BF16";
    case DType::f16:
      return "F16";
    case DType::i32:
      return "I32";
    case DType::u16:
      return "U16";
    case DType::f64:
      return "F64";
    case DType::u8:
      return "U8";
    case DType::f8_e4m3:
      return "F8_E4M3";
  }
  return "?";
}

}  // namespace mt
