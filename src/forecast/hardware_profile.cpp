#include "forecast/hardware_profile.h"

#include <cmath>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <utility>

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

ShapeClass weight_class(int64_t n_in, int64_t n_out) {
  // Between the representatives' sqrt(in * out) of 384, 768 and 1536: the geometric midpoints.
  const double size = std::sqrt(static_cast<double>(n_in) * static_cast<double>(n_out));
  if (size < 543) return ShapeClass::small;
  if (size < 1086) return ShapeClass::medium;
  return ShapeClass::large;
}

double LinearCurve::at(ShapeClass c, int64_t rows) const {
  const std::array<double, kNumLinearRows>& rate = gflops[static_cast<int>(c)];
  if (rows <= kLinearRows.front()) return rate.front();
  for (int i = 1; i < kNumLinearRows; ++i) {
    if (rows <= kLinearRows[i]) {
      const double t =
          std::log(static_cast<double>(rows) / static_cast<double>(kLinearRows[i - 1])) /
          std::log(static_cast<double>(kLinearRows[i]) / static_cast<double>(kLinearRows[i - 1]));
      return rate[i - 1] + t * (rate[i] - rate[i - 1]);
    }
  }
  return rate.back();
}

std::optional<double> AdamWRates::of(DType moments) const {
  switch (moments) {
    case DType::f32:
      return fp32_moments;
    case DType::bf16:
      return bf16_moments;
    case DType::f8_e4m3:
      return fp8_moments;
    case DType::u8:
      return int8_moments;
    default:
      throw std::logic_error("no AdamW rate for moments stored as " + std::string(dtype_name(moments)));
  }
}

namespace {

// The keys of adamw_mparams_per_sec, each with its rate.
auto adamw_keys(AdamWRates& r) {
  return std::array<std::pair<const char*, std::optional<double>*>, 2>{
      {{"fp8_moments", &r.fp8_moments}, {"int8_moments", &r.int8_moments}}};
}

nlohmann::json adamw_json(AdamWRates r) {
  nlohmann::json j = {{"fp32_moments", r.fp32_moments}, {"bf16_moments", r.bf16_moments}};
  for (const auto& [key, rate] : adamw_keys(r))
    if (*rate) j[key] = **rate;
  return j;
}

// fp32 and bf16 moments' rates must be there; an 8-bit one may be missing (an older profile) or null.
AdamWRates read_adamw(const nlohmann::json& j) {
  AdamWRates r;
  r.fp32_moments = j.at("fp32_moments").get<double>();
  r.bf16_moments = j.at("bf16_moments").get<double>();
  for (const auto& [key, rate] : adamw_keys(r))
    if (j.contains(key) && !j.at(key).is_null()) *rate = j.at(key).get<double>();
  return r;
}

nlohmann::json curve_json(const LinearCurve& curve) {
  nlohmann::json j;
  for (ShapeClass c : kAllShapeClasses) j[shape_class_name(c)] = curve.gflops[static_cast<int>(c)];
  return j;
}

nlohmann::json linear_json(const LinearRates& rates) {
  return {{"forward", curve_json(rates.forward)}, {"backward", curve_json(rates.backward)}};
}

void read_curve(const nlohmann::json& j, LinearCurve& curve) {
  for (ShapeClass c : kAllShapeClasses)
    curve.gflops[static_cast<int>(c)] = j.at(shape_class_name(c)).get<std::array<double, kNumLinearRows>>();
}

void read_linear(const nlohmann::json& j, LinearRates& rates) {
  read_curve(j.at("forward"), rates.forward);
  read_curve(j.at("backward"), rates.backward);
}

nlohmann::json by_storage(const std::array<double, 2>& rates) {
  return {{"fp32", rates[0]}, {"16bit", rates[1]}};
}

void read_by_storage(const nlohmann::json& j, std::array<double, 2>& rates) {
  rates = {j.at("fp32").get<double>(), j.at("16bit").get<double>()};
}

// Every rate and bandwidth, read from its key; nlohmann's exception for a missing or mistyped one.
void read_rates(const nlohmann::json& j, HardwareProfile& p) {
  read_linear(j.at("linear_gflops").at("fp32"), p.fp32);
  read_linear(j.at("linear_gflops").at("bf16"), p.bf16);
  read_by_storage(j.at("attention_gflops"), p.attention_gflops);
  read_by_storage(j.at("lm_head_gflops"), p.lm_head_gflops);
  p.adamw_mparams = read_adamw(j.at("adamw_mparams_per_sec"));
  p.norm_melems = j.at("elementwise_melems_per_sec").at("norm").get<double>();
  p.activation_melems = j.at("elementwise_melems_per_sec").at("activation").get<double>();
  p.memory_gbps = j.at("memory_gbps").get<double>();
  p.disk_gbps = j.at("disk_gbps").get<double>();
  if (!j.at("mpi_gbps").is_null()) p.mpi_gbps = j.at("mpi_gbps").get<double>();
  if (!j.at("comm_overlap").is_null()) p.comm_overlap = j.at("comm_overlap").get<double>();
}

void check_rates(const HardwareProfile& p, const std::string& what) {
  bool positive = p.threads > 0 && p.norm_melems > 0 && p.activation_melems > 0 && p.memory_gbps > 0 &&
                  p.disk_gbps > 0 && (!p.mpi_gbps || *p.mpi_gbps > 0);
  for (int i = 0; i < 2; ++i) positive = positive && p.attention_gflops[i] > 0 && p.lm_head_gflops[i] > 0;
  AdamWRates adamw = p.adamw_mparams;
  positive = positive && adamw.fp32_moments > 0 && adamw.bf16_moments > 0;
  for (const auto& [key, rate] : adamw_keys(adamw)) positive = positive && (!*rate || **rate > 0);
  for (const LinearRates* r : {&p.fp32, &p.bf16})
    for (const LinearCurve* curve : {&r->forward, &r->backward})
      for (const auto& by_rows : curve->gflops)
        for (double rate : by_rows) positive = positive && rate > 0;
  if (!positive) fail_data(what + ": rates and bandwidths must be positive");
  if (p.mpi_gbps.has_value() != p.comm_overlap.has_value() || (p.comm_overlap && *p.comm_overlap > 1))
    fail_data(what + ": mpi_gbps and comm_overlap (at most 1) are both measured or both null");
}

}  // namespace

nlohmann::json hardware_profile_json(const HardwareProfile& p) {
  nlohmann::json j = {
      {"cpu_isa", std::string(cpu_isa_name(p.cpu_isa))},
      {"threads", p.threads},
      {"cpu_model", p.cpu_model},
      {"linear_gflops",
       {{"rows", kLinearRows}, {"fp32", linear_json(p.fp32)}, {"bf16", linear_json(p.bf16)}}},
      {"attention_gflops", by_storage(p.attention_gflops)},
      {"lm_head_gflops", by_storage(p.lm_head_gflops)},
      {"adamw_mparams_per_sec", adamw_json(p.adamw_mparams)},
      {"elementwise_melems_per_sec", {{"norm", p.norm_melems}, {"activation", p.activation_melems}}},
      {"memory_gbps", p.memory_gbps},
      {"disk_gbps", p.disk_gbps}};
  j["mpi_gbps"] = p.mpi_gbps ? nlohmann::json(*p.mpi_gbps) : nlohmann::json(nullptr);
  j["comm_overlap"] = p.comm_overlap ? nlohmann::json(*p.comm_overlap) : nlohmann::json(nullptr);
  if (!p.notes.empty()) j["notes"] = p.notes;
  return j;
}

HardwareProfile parse_hardware_profile(const std::string& text, const std::string& what) {
  HardwareProfile p;
  p.source = what;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    const std::string isa = j.at("cpu_isa").get<std::string>();
    const std::optional<CpuIsa> level = parse_cpu_isa(isa);
    if (!level) fail_data(what + ": cpu_isa '" + isa + "' is not " + cpu_isa_choices());
    p.cpu_isa = *level;
    p.threads = j.at("threads").get<int>();
    p.cpu_model = j.at("cpu_model").get<std::string>();
    if (j.contains("notes")) p.notes = j.at("notes").get<std::string>();
    if (j.at("linear_gflops").at("rows").get<std::array<int64_t, kNumLinearRows>>() != kLinearRows)
      fail_data(what + ": its linear rates were timed at other rows than this memtrain's " +
                "(run memtrain calibrate again)");
    read_rates(j, p);
  } catch (const nlohmann::json::exception& e) {
    fail_data(what + ": not a memtrain hardware profile (" + e.what() + ")");
  }
  check_rates(p, what);
  return p;
}

HardwareProfile load_hardware_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail_data("--profile " + path + ": cannot open");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  HardwareProfile p = parse_hardware_profile(text, "--profile " + path);
  p.source = path;
  return p;
}

}  // namespace mt
