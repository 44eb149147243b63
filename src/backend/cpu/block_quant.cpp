// Block-wise quantizing and dequantizing of whole moment tensors, block by block in parallel.
#include "backend/cpu/block_quant.h"

#include <algorithm>

#include "backend/cpu/block_codec.h"
#include "backend/cpu/isa_variant.h"

namespace mt::kernels {

namespace MT_ISA {

void quantize_blocks(MomentCodec c, const float* x, int64_t n, uint8_t* codes, float* scales) {
  const int64_t block = moment_block_size(c);
#pragma omp parallel for
  for (int64_t b = 0; b < moment_block_count(c, n); ++b) {
    const int64_t first = b * block;
    scales[b] = quantize_block(c, x + first, std::min(block, n - first), codes + first);
  }
}

void dequantize_blocks(MomentCodec c, const uint8_t* codes, const float* scales, int64_t n, float* x) {
  const int64_t block = moment_block_size(c);
#pragma omp parallel for
  for (int64_t b = 0; b < moment_block_count(c, n); ++b) {
    const int64_t first = b * block;
    dequantize_block(c, codes + first, scales[b], std::min(block, n - first), x + first);
  }
}

}  // namespace MT_ISA

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
void quantize_blocks(MomentCodec c, const float* x, int64_t n, uint8_t* codes, float* scales) {
  dispatch<&quantize_blocks>(c, x, n, codes, scales);
}
void dequantize_blocks(MomentCodec c, const uint8_t* codes, const float* scales, int64_t n, float* x) {
  dispatch<&dequantize_blocks>(c, codes, scales, n, x);
}
#endif

namespace MT_ISA {
namespace {
const bool enrolled = enroll<&kernels::quantize_blocks>(quantize_blocks) &&
                      enroll<&kernels::dequantize_blocks>(dequantize_blocks);
}  // namespace
}  // namespace MT_ISA

}  // namespace mt::kernels
