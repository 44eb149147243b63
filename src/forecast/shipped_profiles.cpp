#include "forecast/shipped_profiles.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <tuple>

#include "core/word_list.h"
#include "devices/devices.h"
#include "forecast/cpu_model.h"

namespace mt {

namespace {

std::string thread_count(int threads) {
  return std::to_string(threads) + (threads == 1 ? " thread" : " threads");
}

}  // namespace

const std::vector<HardwareProfile>& shipped_hardware_profiles() {
  static const std::vector<HardwareProfile> profiles = [] {
    std::vector<HardwareProfile> parsed;
    for (const ProfileFile& file : shipped_profile_files()) {
      const std::string name(file.name);
      parsed.push_back(parse_hardware_profile(std::string(file.text), "built-in " + name));
      const HardwareProfile& p = parsed.back();
      if (!p.mpi_gbps) throw std::logic_error(name + ": a shipped profile needs MPI rates");
      if (!p.adamw_mparams.fp8_moments || !p.adamw_mparams.int8_moments)
        throw std::logic_error(name + ": a shipped profile needs AdamW's 8-bit moments' rates");
    }
    if (parsed.empty()) throw std::logic_error("no hardware profile was built in (profiles/*.json)");
    return parsed;
  }();
  return profiles;
}

const HardwareProfile& nearest_hardware_profile(const std::vector<HardwareProfile>& profiles, CpuIsa isa,
                                                int threads) {
  // Another level runs other kernels, which is further off than other threads running the same ones.
  const auto distance = [isa, threads](const HardwareProfile& p) {
    const int level = static_cast<int>(p.cpu_isa) - static_cast<int>(isa);
    return std::tuple{std::abs(level), level > 0, std::abs(p.threads - threads), p.threads > threads};
  };
  return *std::min_element(
      profiles.begin(), profiles.end(),
      [&](const HardwareProfile& a, const HardwareProfile& b) { return distance(a) < distance(b); });
}

const HardwareProfile& shipped_hardware_profile(CpuIsa isa, int threads) {
  return nearest_hardware_profile(shipped_hardware_profiles(), isa, threads);
}

std::string describe_profile(const HardwareProfile& profile, CpuIsa isa, int threads) {
  std::string s = std::string(cpu_isa_name(profile.cpu_isa)) + ", " + thread_count(profile.threads) +
                  ", calibrated on " + profile.cpu_model + " (" + profile.source;
  std::vector<std::string> other;
  if (profile.cpu_isa != isa) other.push_back("ISA level");
  if (profile.threads != threads) other.push_back("thread count");
  // Only a plan for this process's level is a plan for this CPU; another level's may be for another machine.
  const bool this_cpu = isa == process_cpu_isa();
  if (this_cpu && profile.cpu_model != host_cpu_model()) other.push_back("CPU");
  if (!other.empty())
    s += "; this plan: " + std::string(cpu_isa_name(isa)) + ", " + thread_count(threads) +
         (this_cpu ? " on " + host_cpu_model() : "") + ": rates from another " + word_list(other, " and ");
  // An older profile: the cost model prices 8-bit moments with the shipped rates (cost_model.cpp).
  if (!profile.adamw_mparams.fp8_moments || !profile.adamw_mparams.int8_moments)
    s += "; AdamW with 8-bit moments at the rates of " +
         shipped_hardware_profile(profile.cpu_isa, profile.threads).source +
         ", which it was calibrated without";
  return s + ")";
}

}  // namespace mt
