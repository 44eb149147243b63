// estimate_run at an ISA level: bf16 products without AVX512-BF16 convert their operands to fp32 tiles (one
// set per thread, here 1), which the plan holds as workspace; every other byte is the same at every level.
#include <gtest/gtest.h>

#include "backend/cpu/matmul.h"
#include "forecast/estimate.h"

namespace mt {
namespace {

CategoryBytes rank0_bytes(Precision precision, CpuIsa isa) {
  TrainConfig c;
  c.model = "gpt2-tiny";
  c.train_iters = 1;
  c.seq_len = 64;
  c.threads = 1;
  c.precision.precision = precision;
  const Estimate e = estimate_run(c, 1, std::nullopt, isa);
  EXPECT_EQ(e.isa, isa);
  return e.ranks.at(0).bytes;
}

TEST(Estimate, Bf16WithoutBf16InstructionsPlansTheConversionTiles) {
  const CategoryBytes avx2 = rank0_bytes(Precision::bf16, CpuIsa::avx2);
  const CategoryBytes native = rank0_bytes(Precision::bf16, CpuIsa::avx512_bf16);
  for (Category c : kAllCategories) {
    const int64_t tiles =
        c == Category::workspace ? kernels::gemm_scratch_floats(DType::bf16, CpuIsa::avx2, 1) * 4 : 0;
    EXPECT_EQ(avx2[c] - native[c], tiles) << category_key(c);
  }
  EXPECT_GT(kernels::gemm_scratch_floats(DType::bf16, CpuIsa::avx2, 1), 0);
  // The levels that take bf16 directly, and those that do not, agree among themselves; fp32 at every level.
  EXPECT_EQ(rank0_bytes(Precision::bf16, CpuIsa::generic).bytes, avx2.bytes);
  EXPECT_EQ(rank0_bytes(Precision::bf16, CpuIsa::avx512).bytes, avx2.bytes);
  EXPECT_EQ(rank0_bytes(Precision::fp32, CpuIsa::generic).bytes,
            rank0_bytes(Precision::fp32, CpuIsa::avx512_bf16).bytes);
}

}  // namespace
}  // namespace mt
