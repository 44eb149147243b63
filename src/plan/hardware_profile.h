// What the cost model needs to know about a machine: matrix-product rates per dtype and shape class, memory,
// MPI and disk bandwidth. `memtrain calibrate` measures one (plan/calibrate.h); without a profile the planner
// uses default_hardware_profile(), a 2-core AVX-512 (AMX bf16) machine's numbers, so a ranking still comes
// out.
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace mt {

// Matrix products by size: the rate of a product depends mostly on how much work each call has.
enum class ShapeClass { small, medium, large };
constexpr int kNumShapeClasses = 3;
constexpr std::array<ShapeClass, kNumShapeClasses> kAllShapeClasses = {ShapeClass::small, ShapeClass::medium,
                                                                       ShapeClass::large};
std::string shape_class_name(ShapeClass c);
// The class of an M x K by K x N product: by the geometric mean of its dimensions.
ShapeClass shape_class(int64_t M, int64_t N, int64_t K);

struct GemmRates {
  std::array<double, kNumShapeClasses> gflops{};  // per ShapeClass
  double operator[](ShapeClass c) const { return gflops[static_cast<int>(c)]; }
  double& operator[](ShapeClass c) { return gflops[static_cast<int>(c)]; }
};

struct HardwareProfile {
  std::string source;  // "default" or the file it was read from
  int threads = 1;     // OpenMP threads the rates were measured with
  GemmRates fp32, bf16;
  // The attention kernels' forward + backward, causal FLOPs per second (not a GEMM: blocked, with softmax);
  // [0] fp32 storage, [1] 16-bit storage.
  std::array<double, 2> attention_gflops{};
  double memory_gbps = 0;          // streaming read + write bandwidth, GB/s (1e9 bytes)
  std::optional<double> mpi_gbps;  // between two ranks; absent when not measured under mpirun
  double disk_gbps = 0;            // sequential write + read of the offload directory

  // fp16 products run as fp32 on CPUs without f16 arithmetic (kernels/matmul.h); bf16 has its own rate.
  const GemmRates& gemm(bool bf16_inputs) const { return bf16_inputs ? bf16 : fp32; }
  double attention(bool sixteen_bit) const { return attention_gflops[sixteen_bit ? 1 : 0]; }
};

// `memtrain calibrate --threads 2` on this project's 2-core machine at a quiet moment (bench/README.md, "Cost
// model"; MPI between two ranks under mpirun), rounded to 3 digits; used when no --profile is given.
HardwareProfile default_hardware_profile();

nlohmann::json hardware_profile_json(const HardwareProfile& profile);
// Data error naming the file for a missing file or missing keys.
HardwareProfile load_hardware_profile(const std::string& path);

}  // namespace mt
