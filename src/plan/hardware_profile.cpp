#include "plan/hardware_profile.h"

#include <cmath>
#include <fstream>

#include "core/error.h"

namespace mt {

std::string shape_class_name(ShapeClass c) {
  switch (c) {
    case ShapeClass::small:
      return "small";
    case ShapeClass::medium:
      return "medium";
    case ShapeClass::large:
      return "large";
  }
  return "?";
}

ShapeClass shape_class(int64_t M, int64_t N, int64_t K) {
  const double mean = std::cbrt(static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K));
  if (mean < 512) return ShapeClass::small;
  if (mean < 1536) return ShapeClass::medium;
  return ShapeClass::large;
}

HardwareProfile default_hardware_profile() {
  HardwareProfile p;
  p.source = "default";
  p.threads = 2;
  p.fp32.gflops = {521, 509, 502};
  p.bf16.gflops = {1020, 1010, 953};
  p.attention_gflops = {47, 474};
  p.memory_gbps = 73.4;
  p.mpi_gbps = 2.19;  // two ranks on this machine, under mpirun
  p.disk_gbps = 0.753;
  return p;
}

namespace {

nlohmann::json rates_json(const GemmRates& rates) {
  nlohmann::json j;
  for (ShapeClass c : kAllShapeClasses) j[shape_class_name(c)] = rates[c];
  return j;
}

}  // namespace

nlohmann::json hardware_profile_json(const HardwareProfile& p) {
  nlohmann::json j = {
      {"threads", p.threads},
      {"gemm_gflops", {{"fp32", rates_json(p.fp32)}, {"bf16", rates_json(p.bf16)}}},
      {"attention_gflops", {{"fp32", p.attention_gflops[0]}, {"16bit", p.attention_gflops[1]}}},
      {"memory_gbps", p.memory_gbps},
      {"disk_gbps", p.disk_gbps}};
  j["mpi_gbps"] = p.mpi_gbps ? nlohmann::json(*p.mpi_gbps) : nlohmann::json(nullptr);
  return j;
}

HardwareProfile load_hardware_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail_data("--profile " + path + ": cannot open");
  HardwareProfile p;
  p.source = path;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    p.threads = j.at("threads").get<int>();
    for (ShapeClass c : kAllShapeClasses) {
      p.fp32[c] = j.at("gemm_gflops").at("fp32").at(shape_class_name(c)).get<double>();
      p.bf16[c] = j.at("gemm_gflops").at("bf16").at(shape_class_name(c)).get<double>();
    }
    p.attention_gflops = {47, 474};
    p.memory_gbps = j.at("memory_gbps").get<double>();
    p.disk_gbps = j.at("disk_gbps").get<double>();
    if (!j.at("mpi_gbps").is_null()) p.mpi_gbps = j.at("mpi_gbps").get<double>();
  } catch (const nlohmann::json::exception& e) {
    fail_data("--profile " + path + ": not a memtrain hardware profile (" + e.what() + ")");
  }
  bool positive = p.threads > 0 && p.attention_gflops[0] > 0 && p.attention_gflops[1] > 0 &&
                  p.memory_gbps > 0 && p.disk_gbps > 0 && (!p.mpi_gbps || *p.mpi_gbps > 0);
  for (ShapeClass c : kAllShapeClasses) positive = positive && p.fp32[c] > 0 && p.bf16[c] > 0;
  if (!positive) fail_data("--profile " + path + ": rates and bandwidths must be positive");
  return p;
}

}  // namespace mt
