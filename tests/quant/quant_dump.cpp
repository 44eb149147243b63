// Runs the 8-bit moment kernels and the base-weight quantizers on raw little-endian arrays, for the numpy
// references of test_moment_quant.py and test_weight_quant.py to compare bit for bit:
//   quant_dump maps OUT_DIR
//       OUT_DIR/{dynamic_signed,dynamic_unsigned,e4m3}.f32: the value of each of the 256 bytes; nf4.f32: the
//       16 NF4 values
//   quant_dump quantize CODEC IN.f32 OUT_PREFIX          (CODEC: dynamic_signed, dynamic_unsigned,
//   e4m3)
//       OUT_PREFIX.codes (u8), OUT_PREFIX.scales (f32) and OUT_PREFIX.back (f32, dequantized)
//   quant_dump adamw FORMAT DIR LR BETA1 BETA2 EPS WEIGHT_DECAY STEP GRAD_MULTIPLIER   (FORMAT: int8,
//   fp8)
//       reads DIR/{param.f32, grad.f32, m.codes, m.scales, v.codes, v.scales, runs.i64 (begin, decay pairs)},
//       takes one step of adamw_update_8bit (fp32 weights in place, fp32 gradients) and writes DIR/out.* of
//       the same names for the weights and moments.
//   quant_dump weights FORMAT DOUBLE IN.f32 OUT_PREFIX FIRST COUNT   (FORMAT: nf4, int8; DOUBLE: 0, 1)
//       OUT_PREFIX.codes (u8), .absmax (f32) or .absmax_codes (u8), .absmax_scales (f32) and .absmax_offset
//       (f32); .back (f32, all n dequantized), .range.f32 and .range.bf16 (elements [FIRST, FIRST + COUNT))
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cpu/adamw_8bit.h"
#include "backend/cpu/block_quant.h"
#include "backend/cpu/dynamic_map.h"
#include "backend/cpu/weight_quant.h"
#include "core/fp8.h"
#include "tests/dump_tool.h"

namespace {

using namespace mt;
using namespace mt::kernels;

template <typename T>
std::vector<T> read_array(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<T> x(static_cast<size_t>(in.tellg()) / sizeof(T));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(x.data()), static_cast<std::streamsize>(x.size() * sizeof(T)));
  return x;
}

template <typename T>
void write_array(const std::string& path, const T* x, size_t n) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(x), static_cast<std::streamsize>(n * sizeof(T)));
  if (!out) throw std::runtime_error("cannot write " + path);
}

MomentCodec parse_codec(const std::string& name) {
  if (name == "dynamic_signed") return MomentCodec::dynamic_signed;
  if (name == "dynamic_unsigned") return MomentCodec::dynamic_unsigned;
  if (name == "e4m3") return MomentCodec::e4m3;
  throw std::runtime_error("unknown codec " + name);
}

void dump_maps(const std::string& dir) {
  write_array(dir + "/dynamic_signed.f32", signed_dynamic_map().value.data(), 256);
  write_array(dir + "/dynamic_unsigned.f32", unsigned_dynamic_map().value.data(), 256);
  std::vector<float> e4m3(256);
  for (int b = 0; b < 256; ++b) e4m3[b] = to_f32(fp8_e4m3{static_cast<uint8_t>(b)});
  write_array(dir + "/e4m3.f32", e4m3.data(), 256);
  write_array(dir + "/nf4.f32", kNf4Values.data(), kNf4Values.size());
}

void quantize(MomentCodec c, const std::string& in, const std::string& prefix) {
  const std::vector<float> x = read_array<float>(in);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> codes(n);
  std::vector<float> scales(moment_block_count(c, n)), back(n);
  quantize_blocks(c, x.data(), n, codes.data(), scales.data());
  dequantize_blocks(c, codes.data(), scales.data(), n, back.data());
  write_array(prefix + ".codes", codes.data(), codes.size());
  write_array(prefix + ".scales", scales.data(), scales.size());
  write_array(prefix + ".back", back.data(), back.size());
}

void adamw_step(MomentFormat format, const std::string& dir, char** hyper) {
  std::vector<float> param = read_array<float>(dir + "/param.f32"),
                     m_scales = read_array<float>(dir + "/m.scales"),
                     v_scales = read_array<float>(dir + "/v.scales");
  const std::vector<float> grad = read_array<float>(dir + "/grad.f32");
  std::vector<uint8_t> m = read_array<uint8_t>(dir + "/m.codes"), v = read_array<uint8_t>(dir + "/v.codes");
  std::vector<DecayRun> runs;
  const std::vector<int64_t> pairs = read_array<int64_t>(dir + "/runs.i64");
  for (size_t r = 0; r + 1 < pairs.size(); r += 2) runs.push_back({pairs[r], pairs[r + 1] != 0});
  const AdamWStep s{std::stof(hyper[0]), std::stof(hyper[1]),  std::stof(hyper[2]), std::stof(hyper[3]),
                    std::stof(hyper[4]), std::stoll(hyper[5]), std::stof(hyper[6])};
  const int64_t n = static_cast<int64_t>(param.size());
  adamw_update_8bit<float, float>(nullptr, param.data(), grad.data(),
                                  {format, m.data(), m_scales.data(), v.data(), v_scales.data()}, n, s, runs,
                                  {});
  write_array(dir + "/out.param.f32", param.data(), param.size());
  write_array(dir + "/out.m.codes", m.data(), m.size());
  write_array(dir + "/out.m.scales", m_scales.data(), m_scales.size());
  write_array(dir + "/out.v.codes", v.data(), v.size());
  write_array(dir + "/out.v.scales", v_scales.data(), v_scales.size());
}

void quantize_weights(WeightFormat format, bool double_quant, const std::string& in,
                      const std::string& prefix, int64_t first, int64_t count) {
  const std::vector<float> x = read_array<float>(in);
  const int64_t n = static_cast<int64_t>(x.size()), blocks = (n + kWeightBlock - 1) / kWeightBlock;
  std::vector<uint8_t> codes(weight_code_bytes(format, n)), absmax_codes(double_quant ? blocks : 0);
  std::vector<float> absmax(double_quant ? 0 : blocks), back(n), range(count), offset(1);
  std::vector<float> absmax_scales(double_quant ? (blocks + kAbsmaxBlock - 1) / kAbsmaxBlock : 0);
  std::vector<bf16> range16(count);
  const QuantizedWeight q{format,
                          n,
                          codes.data(),
                          double_quant ? nullptr : absmax.data(),
                          double_quant ? absmax_codes.data() : nullptr,
                          double_quant ? absmax_scales.data() : nullptr,
                          double_quant ? offset.data() : nullptr};
  quantize_weight(x.data(), q);
  dequantize_weight(q, 0, n, back.data());
  dequantize_weight(q, first, count, range.data());
  dequantize_weight(q, first, count, range16.data());
  write_array(prefix + ".codes", codes.data(), codes.size());
  if (double_quant) {
    write_array(prefix + ".absmax_codes", absmax_codes.data(), absmax_codes.size());
    write_array(prefix + ".absmax_scales", absmax_scales.data(), absmax_scales.size());
    write_array(prefix + ".absmax_offset", offset.data(), 1);
  } else {
    write_array(prefix + ".absmax", absmax.data(), absmax.size());
  }
  write_array(prefix + ".back", back.data(), back.size());
  write_array(prefix + ".range.f32", range.data(), range.size());
  write_array(prefix + ".range.bf16", range16.data(), range16.size());
}

int run(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "maps" && argc == 3) {
    dump_maps(argv[2]);
  } else if (command == "quantize" && argc == 5) {
    quantize(parse_codec(argv[2]), argv[3], argv[4]);
  } else if (command == "adamw" && argc == 11) {
    const std::string format = argv[2];
    if (format != "int8" && format != "fp8") throw std::runtime_error("unknown format " + format);
    adamw_step(format == "int8" ? MomentFormat::int8 : MomentFormat::fp8, argv[3], argv + 4);
  } else if (command == "weights" && argc == 8) {
    const std::string format = argv[2];
    if (format != "nf4" && format != "int8") throw std::runtime_error("unknown format " + format);
    quantize_weights(format == "nf4" ? WeightFormat::nf4 : WeightFormat::int8, std::string(argv[3]) == "1",
                     argv[4], argv[5], std::stoll(argv[6]), std::stoll(argv[7]));
  } else {
    std::fprintf(
        stderr,
        "usage: quant_dump maps DIR | quantize CODEC IN PREFIX | adamw FORMAT DIR ... | weights FORMAT "
        "DOUBLE IN PREFIX FIRST COUNT\n");
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return mt::test::run_dump_tool("quant_dump", run, argc, argv);
}
