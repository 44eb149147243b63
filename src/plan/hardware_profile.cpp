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
  p.fp32 = {.forward = {{434, 458, 452}}, .backward = {{379, 425, 434}}};
  p.bf16 = {.forward = {{856, 879, 929}}, .backward = {{641, 821, 828}}};
  p.attention_gflops = {45.3, 438};
  p.lm_head_gflops = {404, 639};
  p.adamw_mparams = {2230, 3520};
  p.norm_melems = 6560;
  p.activation_melems = 4760;
  p.memory_gbps = 70.0;
  p.mpi_gbps = 2.19;  // two ranks on this machine, under mpirun
  p.comm_overlap = 0;
  p.disk_gbps = 0.753;
  return p;
}

namespace {

nlohmann::json rates_json(const GemmRates& rates) {
  nlohmann::json j;
  for (ShapeClass c : kAllShapeClasses) j[shape_class_name(c)] = rates[c];
  return j;
}

nlohmann::json linear_json(const LinearRates& rates) {
  return {{"forward", rates_json(rates.forward)}, {"backward", rates_json(rates.backward)}};
}

void read_rates(const nlohmann::json& j, GemmRates& rates) {
  for (ShapeClass c : kAllShapeClasses) rates[c] = j.at(shape_class_name(c)).get<double>();
}

void read_linear(const nlohmann::json& j, LinearRates& rates) {
  read_rates(j.at("forward"), rates.forward);
  read_rates(j.at("backward"), rates.backward);
}

nlohmann::json by_storage(const std::array<double, 2>& rates) {
  return {{"fp32", rates[0]}, {"16bit", rates[1]}};
}

void read_by_storage(const nlohmann::json& j, std::array<double, 2>& rates) {
  rates = {j.at("fp32").get<double>(), j.at("16bit").get<double>()};
}

}  // namespace

nlohmann::json hardware_profile_json(const HardwareProfile& p) {
  nlohmann::json j = {
      {"threads", p.threads},
      {"linear_gflops", {{"fp32", linear_json(p.fp32)}, {"bf16", linear_json(p.bf16)}}},
      {"attention_gflops", by_storage(p.attention_gflops)},
      {"lm_head_gflops", by_storage(p.lm_head_gflops)},
      {"adamw_mparams_per_sec", {{"fp32_moments", p.adamw_mparams[0]}, {"bf16_moments", p.adamw_mparams[1]}}},
      {"elementwise_melems_per_sec", {{"norm", p.norm_melems}, {"activation", p.activation_melems}}},
      {"memory_gbps", p.memory_gbps},
      {"disk_gbps", p.disk_gbps}};
  j["mpi_gbps"] = p.mpi_gbps ? nlohmann::json(*p.mpi_gbps) : nlohmann::json(nullptr);
  j["comm_overlap"] = p.comm_overlap ? nlohmann::json(*p.comm_overlap) : nlohmann::json(nullptr);
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
    read_linear(j.at("linear_gflops").at("fp32"), p.fp32);
    read_linear(j.at("linear_gflops").at("bf16"), p.bf16);
    read_by_storage(j.at("attention_gflops"), p.attention_gflops);
    read_by_storage(j.at("lm_head_gflops"), p.lm_head_gflops);
    const nlohmann::json& adamw = j.at("adamw_mparams_per_sec");
    p.adamw_mparams = {adamw.at("fp32_moments").get<double>(), adamw.at("bf16_moments").get<double>()};
    p.norm_melems = j.at("elementwise_melems_per_sec").at("norm").get<double>();
    p.activation_melems = j.at("elementwise_melems_per_sec").at("activation").get<double>();
    p.memory_gbps = j.at("memory_gbps").get<double>();
    p.disk_gbps = j.at("disk_gbps").get<double>();
    if (!j.at("mpi_gbps").is_null()) p.mpi_gbps = j.at("mpi_gbps").get<double>();
    if (!j.at("comm_overlap").is_null()) p.comm_overlap = j.at("comm_overlap").get<double>();
  } catch (const nlohmann::json::exception& e) {
    fail_data("--profile " + path + ": not a memtrain hardware profile (" + e.what() + ")");
  }
  bool positive = p.threads > 0 && p.norm_melems > 0 && p.activation_melems > 0 && p.memory_gbps > 0 &&
                  p.disk_gbps > 0 && (!p.mpi_gbps || *p.mpi_gbps > 0);
  for (int i = 0; i < 2; ++i)
    positive = positive && p.attention_gflops[i] > 0 && p.lm_head_gflops[i] > 0 && p.adamw_mparams[i] > 0;
  for (ShapeClass c : kAllShapeClasses)
    for (const LinearRates* r : {&p.fp32, &p.bf16})
      positive = positive && r->forward[c] > 0 && r->backward[c] > 0;
  if (!positive) fail_data("--profile " + path + ": rates and bandwidths must be positive");
  if (p.mpi_gbps.has_value() != p.comm_overlap.has_value() || (p.comm_overlap && *p.comm_overlap > 1))
    fail_data("--profile " + path + ": mpi_gbps and comm_overlap (at most 1) are both measured or both null");
  return p;
}

}  // namespace mt
