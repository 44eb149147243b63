#include "forecast/gpu_profile.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "core/error.h"
#include "forecast/shipped_profiles.h"

namespace mt {

namespace {

// A shipped file is ours: a missing or mistyped field is a bug of the build, said with the file's name.
GpuProfile parse_gpu_profile(const ProfileFile& file) {
  try {
    const nlohmann::json j = nlohmann::json::parse(file.text);
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
    if (file.name != "profiles/gpu/" + p.gpu + ".json")
      throw std::invalid_argument("named for another gpu (" + p.gpu + ")");
    return p;
  } catch (const std::exception& e) {
    throw std::logic_error("built-in " + std::string(file.name) + ": " + e.what());
  }
}

}  // namespace

const std::vector<GpuProfile>& shipped_gpu_profiles() {
  static const std::vector<GpuProfile> profiles = [] {
    std::vector<GpuProfile> parsed;
    for (const ProfileFile& file : shipped_gpu_profile_files()) parsed.push_back(parse_gpu_profile(file));
    return parsed;
  }();
  return profiles;
}

std::string gpu_profile_names() {
  std::string names;
  for (const GpuProfile& p : shipped_gpu_profiles()) names += (names.empty() ? "" : ", ") + p.gpu;
  return names;
}

const GpuProfile& gpu_profile(const std::string& gpu, const std::string& flag) {
  for (const GpuProfile& p : shipped_gpu_profiles())
    if (p.gpu == gpu) return p;
  fail_usage(flag + " " + gpu + ": expected one of " + gpu_profile_names());
}

}  // namespace mt
