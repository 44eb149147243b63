// Products with a quantized frozen weight against the same products with the whole weight dequantized: the
// tiles must give what linear_forward and linear_backward give. The quantizers themselves are checked
// against numpy in tests/quant/test_weight_quant.py.
#include <gtest/gtest.h>
#include <omp.h>

#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/weight_quant.h"
#include "kernels_test_util.h"

namespace mt::kernels {
namespace {

using testing::bitwise_equal;
using testing::random_floats;
using testing::to_storage;

// A weight of n elements, quantized, with its buffers.
struct Quantized {
  std::vector<uint8_t> codes, absmax_codes;
  std::vector<float> absmax, absmax_scales, offset = std::vector<float>(1);
  QuantizedWeight q;

  Quantized(const std::vector<float>& w, WeightFormat format, bool double_quant) {
    const int64_t n = static_cast<int64_t>(w.size()), blocks = (n + kWeightBlock - 1) / kWeightBlock;
    codes.resize(weight_code_bytes(format, n));
    if (double_quant) {
      absmax_codes.resize(blocks);
      absmax_scales.resize((blocks + kAbsmaxBlock - 1) / kAbsmaxBlock);
    } else {
      absmax.resize(blocks);
    }
    q = {format,
         n,
         codes.data(),
         double_quant ? nullptr : absmax.data(),
         double_quant ? absmax_codes.data() : nullptr,
         double_quant ? absmax_scales.data() : nullptr,
         double_quant ? offset.data() : nullptr};
    quantize_weight(w.data(), q);
  }
};

constexpr int64_t M = 5, kIn = 70, kOut = 300;  // the output spans three tiles, the last one short

template <typename T>
void expect_products_match(WeightFormat format, bool double_quant, WeightLayout layout) {
  SCOPED_TRACE(std::string(format == WeightFormat::nf4 ? "nf4" : "int8") + (double_quant ? " double" : "") +
               (layout == WeightLayout::out_in ? " out_in" : " in_out"));
  const Quantized w(random_floats(kIn * kOut, 1, 0.05), format, double_quant);
  std::vector<T> dense(kIn * kOut), tile(quantized_tile_elems(kIn, kOut));
  dequantize_weight(w.q, 0, kIn * kOut, dense.data());
  const std::vector<T> inp = to_storage<T>(random_floats(M * kIn, 2)),
                       dout = to_storage<T>(random_floats(M * kOut, 3));
  const std::vector<T> bias = to_storage<T>(random_floats(kOut, 4));
  std::vector<T> want(M * kOut), got(M * kOut), want_dinp(M * kIn), got_dinp(M * kIn);
  std::vector<float> dweight(kIn * kOut);
  // The 16-bit products' tiles where the level has no native bf16 product (one more float keeps data()
  // non-null).
  std::vector<float> scratch(gemm_scratch_floats(dtype_of<T>(), cpu_isa(), omp_get_max_threads()) + 1);
  for (bool accumulate : {false, true}) {
    want = got = to_storage<T>(random_floats(M * kOut, 5));
    linear_forward(want.data(), inp.data(), dense.data(), bias.data(), M, kIn, kOut, accumulate,
                   scratch.data(), layout);
    quantized_linear_forward(got.data(), inp.data(), w.q, bias.data(), M, kIn, kOut, accumulate, tile.data(),
                             scratch.data(), layout);
    EXPECT_TRUE(bitwise_equal(got, want)) << "forward, accumulate " << accumulate;
    want_dinp = got_dinp = to_storage<T>(random_floats(M * kIn, 6));
    linear_backward<T, float>(want_dinp.data(), dweight.data(), nullptr, dout.data(), inp.data(),
                              dense.data(), M, kIn, kOut, accumulate, scratch.data(), layout);
    quantized_linear_backward_input(got_dinp.data(), dout.data(), w.q, M, kIn, kOut, accumulate, tile.data(),
                                    scratch.data(), layout);
    EXPECT_TRUE(bitwise_equal(got_dinp, want_dinp)) << "input gradient, accumulate " << accumulate;
  }
}

TEST(KernelQuantizedLinear, TilesGiveTheWholeWeightsProducts) {
  for (WeightFormat format : {WeightFormat::nf4, WeightFormat::int8})
    for (bool double_quant : {false, true})
      for (WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
        expect_products_match<float>(format, double_quant, layout);
        expect_products_match<bf16>(format, double_quant, layout);
      }
}

TEST(KernelQuantizedLinear, TileIsTheSliceOfTheWholeDequantizedWeight) {
  const Quantized w(random_floats(kIn * kOut, 7, 0.05), WeightFormat::nf4, true);
  std::vector<float> whole(kIn * kOut), tile(3 * 41);
  dequantize_weight(w.q, 0, kIn * kOut, whole.data());
  dequantize_weight_tile(w.q, kOut, 11, 3, 97, 41, tile.data());  // odd start: a low nibble first
  std::vector<float> slice;
  for (int64_t r = 11; r < 14; ++r) slice.insert(slice.end(), &whole[r * kOut + 97], &whole[r * kOut + 138]);
  EXPECT_TRUE(bitwise_equal(tile, slice));
}

}  // namespace
}  // namespace mt::kernels
