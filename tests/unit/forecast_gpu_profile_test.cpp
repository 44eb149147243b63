// The GPUs' profiles: each shipped file read back as it is, a profile file read through the same parser, and
// the cost model's rates derived from a card's peaks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "forecast/gpu_profile.h"
#include "forecast/shipped_profiles.h"

namespace mt {
namespace {

GpuProfile h100() {
  return gpu_profile("h100", "--gpu");
}

TEST(GpuProfile, ShippedOnesRoundTripThroughTheirJson) {
  ASSERT_EQ(shipped_gpu_profiles().size(), shipped_gpu_profile_files().size());
  for (size_t i = 0; i < shipped_gpu_profiles().size(); ++i)
    EXPECT_EQ(gpu_profile_json(shipped_gpu_profiles()[i]),
              nlohmann::ordered_json::parse(shipped_gpu_profile_files()[i].text));
  EXPECT_EQ(h100().name, "NVIDIA H100 80GB HBM3");
}

TEST(GpuProfile, AFileIsReadAsAShippedOneIs) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "memtrain_gpu_profile_test";
  std::filesystem::create_directories(dir);
  GpuProfile measured = h100();
  measured.source = "calibrate";
  measured.runtime_overhead_bytes = int64_t{3} << 30;
  std::ofstream(dir / "measured.json") << gpu_profile_json(measured).dump(2);
  const GpuProfile read = gpu_profile((dir / "measured.json").string(), "--gpu");
  EXPECT_EQ(gpu_profile_json(read), gpu_profile_json(measured));
  // Out of order: the overhead is not below the memory.
  measured.runtime_overhead_bytes = measured.memory_bytes;
  std::ofstream(dir / "bad.json") << gpu_profile_json(measured).dump(2);
  try {
    gpu_profile((dir / "bad.json").string(), "--gpu");
    FAIL() << "a bad profile was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::data);
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(GpuProfile, RatesFromTheCardsPeaks) {
  HardwareProfile host;
  host.cpu_isa = CpuIsa::avx2;
  host.threads = 3;
  host.disk_gbps = 1.5;
  host.mpi_gbps = 2.5;
  host.comm_overlap = 0.25;
  const GpuProfile gpu = h100();
  const HardwareProfile p = hardware_profile_of(gpu, host);
  // Every linear kernel at its dtype's dense peak, at any weight size and rows.
  for (ShapeClass c : kAllShapeClasses)
    for (int64_t rows : {int64_t{1}, int64_t{1024}, int64_t{1} << 20}) {
      EXPECT_DOUBLE_EQ(p.bf16.forward.at(c, rows), gpu.bf16_tflops * 1e3);
      EXPECT_DOUBLE_EQ(p.bf16.backward.at(c, rows), gpu.bf16_tflops * 1e3);
      EXPECT_DOUBLE_EQ(p.fp32.forward.at(c, rows), gpu.fp32_tflops * 1e3);
    }
  // fp16 products on the tensor cores, as bf16's; the host's own profile runs them as fp32.
  EXPECT_EQ(&p.linear(DType::f16), &p.bf16);
  EXPECT_EQ(&p.linear(DType::f32), &p.fp32);
  EXPECT_EQ(&host.linear(DType::f16), &host.fp32);
  EXPECT_DOUBLE_EQ(p.attention(true), gpu.bf16_tflops * 1e3);
  EXPECT_DOUBLE_EQ(p.lm_head(false), gpu.fp32_tflops * 1e3);
  // The bandwidth over the bytes an element moves: 3 16-bit tensors elementwise; AdamW 28 bytes a parameter
  // with fp32 moments (master and gradient read, master written, both moments read and written), 16 with
  // 8-bit ones.
  EXPECT_DOUBLE_EQ(p.memory_gbps, gpu.memory_gbps);
  EXPECT_DOUBLE_EQ(p.norm_melems, gpu.memory_gbps * 1e3 / 6);
  EXPECT_DOUBLE_EQ(p.activation_melems, p.norm_melems);
  EXPECT_DOUBLE_EQ(p.adamw_mparams.fp32_moments, gpu.memory_gbps * 1e3 / 28);
  EXPECT_DOUBLE_EQ(*p.adamw_mparams.of(DType::bf16), gpu.memory_gbps * 1e3 / 20);
  EXPECT_DOUBLE_EQ(*p.adamw_mparams.of(DType::u8), gpu.memory_gbps * 1e3 / 16);
  EXPECT_DOUBLE_EQ(*p.adamw_mparams.of(DType::f8_e4m3), gpu.memory_gbps * 1e3 / 16);
  // What the host does stays the host's.
  EXPECT_EQ(p.cpu_isa, CpuIsa::avx2);
  EXPECT_EQ(p.threads, 3);
  EXPECT_EQ(p.disk_gbps, 1.5);
  EXPECT_EQ(p.mpi_gbps, 2.5);
  EXPECT_EQ(p.comm_overlap, 0.25);
}

}  // namespace
}  // namespace mt
