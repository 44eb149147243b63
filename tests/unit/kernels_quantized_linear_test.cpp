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
struct QuantizedBuffers {
  std::vector<uint8_t> codes, absmax_codes;
  std::vector<float> absmax, absmax_scales, offset = std::vector<float>(1);
  QuantizedWeight q;

  QuantizedBuffers(const std::vector<float>& w, WeightFormat format, bool double_quant) {
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

constexpr int64_t kTokens = 5, kIn = 70, kOut = 300;  // the output spans three tiles, the last one short

// The weight as stored, in parts of whole stored rows quantized on their own (`part_rows` of them each, the
// last part the rest), and dequantized whole.
template <typename T>
struct PartedWeight {
  std::vector<QuantizedBuffers> parts;
  std::vector<QuantizedWeight> views;
  std::vector<T> dense;

  PartedWeight(WeightFormat format, bool double_quant, int64_t row_length, int64_t rows, int64_t part_rows) {
    for (int64_t row0 = 0; row0 < rows; row0 += part_rows) {
      const int64_t n = std::min(part_rows, rows - row0) * row_length;
      parts.emplace_back(random_floats(n, 1 + row0, 0.05), format, double_quant);
      std::vector<T> part(n);
      dequantize_weight(parts.back().q, 0, n, part.data());
      dense.insert(dense.end(), part.begin(), part.end());
    }
    for (const QuantizedBuffers& p : parts) views.push_back(p.q);
  }
};

// part_rows: rows of the stored matrix per quantized part (LLaMA's fused q, k, v), all rows for one part.
template <typename T>
void expect_products_match(WeightFormat format, bool double_quant, WeightLayout layout, int64_t part_rows) {
  SCOPED_TRACE(std::string(format == WeightFormat::nf4 ? "nf4" : "int8") + (double_quant ? " double" : "") +
               (layout == WeightLayout::out_in ? " out_in" : " in_out") + " parts of " +
               std::to_string(part_rows) + " rows");
  const bool out_in = layout == WeightLayout::out_in;
  const PartedWeight<T> w(format, double_quant, out_in ? kIn : kOut, out_in ? kOut : kIn, part_rows);
  const std::vector<T>& dense = w.dense;
  std::vector<T> tile(quantized_tile_elems(kIn, kOut));
  const std::vector<T> inp = to_storage<T>(random_floats(kTokens * kIn, 2)),
                       dout = to_storage<T>(random_floats(kTokens * kOut, 3));
  const std::vector<T> bias = to_storage<T>(random_floats(kOut, 4));
  std::vector<T> want(kTokens * kOut), got(kTokens * kOut), want_dinp(kTokens * kIn), got_dinp(kTokens * kIn);
  std::vector<float> dweight(kIn * kOut);
  // The 16-bit products' tiles where the level has no native bf16 product (one more float keeps data()
  // non-null).
  std::vector<float> scratch(gemm_scratch_floats(dtype_of<T>(), cpu_isa(), omp_get_max_threads()) + 1);
  for (bool accumulate : {false, true}) {
    want = got = to_storage<T>(random_floats(kTokens * kOut, 5));
    linear_forward(want.data(), inp.data(), dense.data(), bias.data(), kTokens, kIn, kOut, accumulate,
                   scratch.data(), layout);
    quantized_linear_forward(got.data(), inp.data(), w.views, bias.data(), kTokens, kIn, kOut, accumulate,
                             tile.data(), scratch.data(), layout);
    EXPECT_TRUE(bitwise_equal(got, want)) << "forward, accumulate " << accumulate;
    want_dinp = got_dinp = to_storage<T>(random_floats(kTokens * kIn, 6));
    linear_backward<T, float>(want_dinp.data(), dweight.data(), nullptr, dout.data(), inp.data(),
                              dense.data(), kTokens, kIn, kOut, accumulate, scratch.data(), layout);
    quantized_linear_backward_input(got_dinp.data(), dout.data(), w.views, kTokens, kIn, kOut, accumulate,
                                    tile.data(), scratch.data(), layout);
    EXPECT_TRUE(bitwise_equal(got_dinp, want_dinp)) << "input gradient, accumulate " << accumulate;
  }
}

TEST(KernelQuantizedLinear, TilesGiveTheWholeWeightsProducts) {
  for (WeightFormat format : {WeightFormat::nf4, WeightFormat::int8})
    for (bool double_quant : {false, true})
      for (WeightLayout layout : {WeightLayout::out_in, WeightLayout::in_out}) {
        const int64_t rows = layout == WeightLayout::out_in ? kOut : kIn;
        expect_products_match<float>(format, double_quant, layout, rows);
        expect_products_match<bf16>(format, double_quant, layout, rows);
        expect_products_match<f16>(format, double_quant, layout, rows);
      }
}

// A fused weight's parts: 300 rows of 70 in parts of 130, 130 and 40, so parts and tiles of 128 rows cross.
TEST(KernelQuantizedLinear, PartsStackedByRowsGiveTheWholeWeightsProducts) {
  for (WeightFormat format : {WeightFormat::nf4, WeightFormat::int8}) {
    expect_products_match<float>(format, true, WeightLayout::out_in, 130);
    expect_products_match<bf16>(format, false, WeightLayout::out_in, 130);
  }
}

// The buffer layout the plan sizes: a view at a buffer of quantized_weight_bytes reads back what the
// separately allocated buffers hold.
TEST(KernelQuantizedLinear, OneBufferViewHoldsTheQuantizedWeight) {
  const std::vector<float> values = random_floats(1001, 9, 0.05);
  for (bool double_quant : {false, true}) {
    const QuantizedBuffers separate(values, WeightFormat::nf4, double_quant);
    std::vector<float> buffer(quantized_weight_bytes(WeightFormat::nf4, 1001, double_quant) / 4);
    const QuantizedWeight view = quantized_weight_at(WeightFormat::nf4, 1001, double_quant, buffer.data());
    quantize_weight(values.data(), view);
    EXPECT_LE(reinterpret_cast<const char*>(view.codes + weight_code_bytes(WeightFormat::nf4, 1001)),
              reinterpret_cast<const char*>(buffer.data() + buffer.size()));
    std::vector<float> want(1001), got(1001);
    dequantize_weight(separate.q, 0, 1001, want.data());
    dequantize_weight(view, 0, 1001, got.data());
    EXPECT_TRUE(bitwise_equal(got, want)) << "double quantization " << double_quant;
  }
}

TEST(KernelQuantizedLinear, TileIsTheSliceOfTheWholeDequantizedWeight) {
  const QuantizedBuffers w(random_floats(kIn * kOut, 7, 0.05), WeightFormat::nf4, true);
  std::vector<float> whole(kIn * kOut), tile(3 * 41);
  dequantize_weight(w.q, 0, kIn * kOut, whole.data());
  dequantize_weight_tile(w.q, kOut, 11, 3, 97, 41, tile.data());  // odd start: a low nibble first
  std::vector<float> slice;
  for (int64_t r = 11; r < 14; ++r) slice.insert(slice.end(), &whole[r * kOut + 97], &whole[r * kOut + 138]);
  EXPECT_TRUE(bitwise_equal(tile, slice));
}

}  // namespace
}  // namespace mt::kernels
