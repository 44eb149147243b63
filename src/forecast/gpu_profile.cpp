#include "forecast/gpu_profile.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/error.h"
#include "core/json_text.h"
#include "core/whole_file.h"
#include "forecast/shipped_profiles.h"

namespace mt {

namespace {

// The bytes each element moves, for rates from the memory bandwidth. An elementwise kernel's backward reads
// the forward's input and the incoming gradient and writes the outgoing one: three tensors, 16-bit as a GPU
// run stores them (fp32 moves twice that; a peak's prediction takes the lighter). AdamW reads the fp32
// master weight and gradient and reads and writes both moments; 8-bit moments' block scales are left out.
constexpr double kElementwiseBytes = 3 * 2;
double adamw_bytes(double moment_bytes) {
  return 3 * 4 + 2 * 2 * moment_bytes;
}

// A profile's JSON; nlohmann's exception for a missing or mistyped key, std::invalid_argument for values out
// of order.
GpuProfile parse_gpu_profile(const nlohmann::json& j) {
  GpuProfile p{.gpu = j.at("gpu").get<std::string>(),
               .name = j.at("name").get<std::string>(),
               .source = j.at("source").get<std::string>(),
               .notes = j.at("notes").get<std::string>(),
               .memory_bytes = j.at("memory_bytes").get<int64_t>(),
               .runtime_overhead_bytes = j.at("runtime_overhead_bytes").get<int64_t>(),
               .bf16_tflops = j.at("bf16_tflops").get<double>(),
               .tf32_tflops = j.at("tf32_tflops").get<double>(),
               .fp32_tflops = j.at("fp32_tflops").get<double>(),
               .memory_gbps = j.at("memory_gbps").get<double>()};
  if (p.source != "published" && p.source != "calibrate")
    throw std::invalid_argument("source " + p.source + ": expected published or calibrate");
  if (p.memory_bytes <= 0 || p.runtime_overhead_bytes < 0 || p.runtime_overhead_bytes >= p.memory_bytes)
    throw std::invalid_argument("memory_bytes and runtime_overhead_bytes out of order");
  if (!(p.bf16_tflops > 0 && p.tf32_tflops > 0 && p.fp32_tflops > 0 && p.memory_gbps > 0))
    throw std::invalid_argument("rates must be positive");
  return p;
}

// A shipped file is ours: a missing or mistyped field is a bug of the build, said with the file's name.
GpuProfile parse_shipped(const ProfileFile& file) {
  try {
    GpuProfile p = parse_gpu_profile(nlohmann::json::parse(file.text));
    if (file.name != "profiles/gpu/" + p.gpu + ".json")
      throw std::invalid_argument("named for another gpu (" + p.gpu + ")");
    return p;
  } catch (const std::exception& e) {
    throw std::logic_error("built-in " + std::string(file.name) + ": " + e.what());
  }
}

// A user's file (calibrate's, or one edited by hand): what is wrong with it is a data error naming it.
GpuProfile load_gpu_profile(const std::string& path, const std::string& flag) {
  const std::string what = flag + " " + path;
  const nlohmann::json j = parse_json_text(read_whole_file(path, flag), what, false);
  try {
    return parse_gpu_profile(j);
  } catch (const nlohmann::json::exception& e) {
    fail_data(what + ": not a memtrain GPU profile (" + json_error_text(e) + ")");
  } catch (const std::invalid_argument& e) {
    fail_data(what + ": not a memtrain GPU profile (" + e.what() + ")");
  }
}

// Every kernel class and row count of a curve at one rate.
LinearRates flat_linear(double gflops) {
  LinearRates rates;
  for (LinearCurve* curve : {&rates.forward, &rates.backward})
    for (auto& by_rows : curve->gflops) by_rows.fill(gflops);
  return rates;
}

}  // namespace

const std::vector<GpuProfile>& shipped_gpu_profiles() {
  static const std::vector<GpuProfile> profiles = [] {
    std::vector<GpuProfile> parsed;
    for (const ProfileFile& file : shipped_gpu_profile_files()) parsed.push_back(parse_shipped(file));
    return parsed;
  }();
  return profiles;
}

std::string gpu_profile_names() {
  std::string names;
  for (const GpuProfile& p : shipped_gpu_profiles()) names += (names.empty() ? "" : ", ") + p.gpu;
  return names;
}

void fail_gpu_without_cuda(const std::string& gpu) {
  fail_usage("--gpu " + gpu + ": a GPU's profile plans for --device cuda");
}

GpuProfile gpu_profile(const std::string& gpu, const std::string& flag) {
  if (gpu.find('/') != std::string::npos || gpu.ends_with(".json")) return load_gpu_profile(gpu, flag);
  for (const GpuProfile& p : shipped_gpu_profiles())
    if (p.gpu == gpu) return p;
  fail_usage(flag + " " + gpu + ": expected one of " + gpu_profile_names() +
             ", or a profile file from `memtrain calibrate --device cuda`");
}

nlohmann::ordered_json gpu_profile_json(const GpuProfile& p) {
  return {{"gpu", p.gpu},
          {"name", p.name},
          {"source", p.source},
          {"notes", p.notes},
          {"memory_bytes", p.memory_bytes},
          {"runtime_overhead_bytes", p.runtime_overhead_bytes},
          {"bf16_tflops", p.bf16_tflops},
          {"tf32_tflops", p.tf32_tflops},
          {"fp32_tflops", p.fp32_tflops},
          {"memory_gbps", p.memory_gbps}};
}

HardwareProfile hardware_profile_of(const GpuProfile& gpu, const HardwareProfile& host) {
  HardwareProfile p = host;  // the host's own: its level and threads, MPI and disk
  p.source = "gpu " + gpu.gpu;
  p.notes = "peaks of " + gpu.name + " (" + gpu.source + ")";
  // fp32 products stay fp32 unless TF32 is asked for (backend/cuda/matmul.cuh), so fp32's peak is theirs.
  const double fp32 = gpu.fp32_tflops * 1e3, bf16 = gpu.bf16_tflops * 1e3;
  p.fp32 = flat_linear(fp32);
  p.bf16 = flat_linear(bf16);
  p.f16_at_bf16_rate = true;
  p.attention_gflops = {fp32, bf16};
  p.lm_head_gflops = {fp32, bf16};
  const double bytes_per_s = gpu.memory_gbps * 1e9;
  p.norm_melems = p.activation_melems = bytes_per_s / kElementwiseBytes / 1e6;
  p.adamw_mparams = {.fp32_moments = bytes_per_s / adamw_bytes(4) / 1e6,
                     .bf16_moments = bytes_per_s / adamw_bytes(2) / 1e6,
                     .fp8_moments = bytes_per_s / adamw_bytes(1) / 1e6,
                     .int8_moments = bytes_per_s / adamw_bytes(1) / 1e6};
  p.memory_gbps = gpu.memory_gbps;
  return p;
}

std::string describe_gpu_rates(const GpuProfile& gpu) {
  char rates[128];
  std::snprintf(rates, sizeof rates, "bf16 %.4g, fp32 %.4g TFLOP/s, memory %.4g GB/s", gpu.bf16_tflops,
                gpu.fp32_tflops, gpu.memory_gbps);
  const bool published = gpu.source == "published";
  return gpu.name + " (" + gpu.gpu + ", " + (published ? "published" : "measured by calibrate") +
         " peaks: " + rates + "); predicted tokens/s are upper bounds" +
         (published ? " until `memtrain calibrate --device cuda` measures the card"
                    : ": no step runs every kernel at its peak");
}

}  // namespace mt
