// Reading back a quantized frozen weight (core/weight_format.h; backend/cpu/weight_quant.h says what the
// codes mean): the per-element arithmetic that the CPU's dequantizer (backend/cpu/weight_quant.cpp) and the
// GPU's (backend/cuda/weight_quant.cu) must compute alike, so that both products read the same weights bit
// for bit, and the split of a tile's rows over the parts of a fused matrix. MT_HOST_DEVICE, so that nvcc
// builds it for both sides.
//
// No namespace and no include guard of its own, as core/adamw_element.h (its top says why): include it inside
// a namespace that belongs to the build compiling it (mt::kernels::MT_ISA, mt::cuda), once per translation
// unit. Include first, outside the namespace: <algorithm>, <cmath>, <cstdint>, core/host_device.h,
// core/weight_format.h.

// Block b's absmax as stored: fp32, or its double-quantized code read back with one fused multiply-add;
// `signed_map` is the signed dynamic map's 256 values (backend/cpu/dynamic_map.h) where the caller's side
// holds them.
MT_HOST_DEVICE inline float stored_weight_absmax(const ::mt::QuantizedWeight& q, int64_t b,
                                                 const float* signed_map) {
  if (q.absmax) return q.absmax[b];
  const float code = signed_map[q.absmax_codes[b]], scale = q.absmax_scales[b / ::mt::kAbsmaxBlock];
#if defined(__CUDA_ARCH__)
  return fmaf(code, scale, *q.absmax_offset);
#else
  return std::fma(code, scale, *q.absmax_offset);
#endif
}

// An int8 block's step, from its absmax, and element i read back with it.
MT_HOST_DEVICE inline float int8_weight_scale(float absmax) {
  return absmax / 127.0f;
}
MT_HOST_DEVICE inline float int8_weight_value(const uint8_t* codes, int64_t i, float scale) {
  return static_cast<float>(static_cast<int8_t>(codes[i])) * scale;
}

// Element i of an nf4 block: element 2k in the high nibble of byte k, as bitsandbytes packs them; `values`
// is the NF4 table (kernels::kNf4Values) where the caller's side holds it.
MT_HOST_DEVICE inline float nf4_weight_value(const uint8_t* codes, int64_t i, float absmax,
                                             const float* values) {
  const int shift = (i & 1) == 0 ? 4 : 0;
  return values[(codes[i >> 1] >> shift) & 15] * absmax;
}

// Calls f(part, first, count, tile_row) for each part of a matrix (rows of row_length, the parts' rows in
// order) that holds rows of the tile [row0, row0 + rows): the part's rows [first, first + count) are the
// tile's from tile_row on. Host code: it reads the parts' views, not their bytes.
template <class F>
void for_each_part_of_rows(::mt::QuantizedMatrix parts, int64_t row_length, int64_t row0, int64_t rows,
                           F&& f) {
  int64_t part_row0 = 0;  // the part's first row in the matrix
  for (const ::mt::QuantizedWeight& part : parts) {
    const int64_t part_rows = part.n / row_length;
    const int64_t lo = std::max(row0, part_row0), hi = std::min(row0 + rows, part_row0 + part_rows);
    if (lo < hi) f(part, lo - part_row0, hi - lo, lo - row0);
    part_row0 += part_rows;
  }
}
