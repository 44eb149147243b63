// The hardware profiles shipped in profiles/ of the source tree, one per ISA level and thread count they were
// calibrated at, compiled into the binary (cmake/embed_profiles.cmake) so that it plans from any directory;
// and the choice of one for a plan at a level and thread count.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/cpu_isa.h"
#include "forecast/hardware_profile.h"

namespace mt {

struct ProfileFile {
  std::string_view name;  // "profiles/avx2-2threads.json"
  std::string_view text;
};

// Every profiles/*.json as it was at build time; defined in the generated shipped_profile_files.cpp.
std::span<const ProfileFile> shipped_profile_files();
// Every profiles/gpu/*.json (forecast/gpu_profile.h), likewise.
std::span<const ProfileFile> shipped_gpu_profile_files();

// The files parsed, once. Each has MPI rates and 8-bit AdamW rates (the cost model falls back on them for a
// profile without).
const std::vector<HardwareProfile>& shipped_hardware_profiles();

// The profile of `profiles` (not empty) for a plan at `isa` with `threads` per rank: the exact match; else
// the nearest level (ties: the lower), and in it the nearest thread count (ties: the fewer).
const HardwareProfile& nearest_hardware_profile(const std::vector<HardwareProfile>& profiles, CpuIsa isa,
                                                int threads);
// The nearest of the shipped ones.
const HardwareProfile& shipped_hardware_profile(CpuIsa isa, int threads);

// "avx2, 2 threads, calibrated on AMD EPYC (built-in profiles/avx2-2threads.json)", and when the profile is
// not of the plan's level and threads, or (for a plan at this process's level) not of this CPU's model,
// "; this plan: avx512, 1 thread: rates from another ISA level and thread count" inside the brackets; for a
// profile without 8-bit AdamW rates, where they come from.
std::string describe_profile(const HardwareProfile& profile, CpuIsa isa, int threads);

}  // namespace mt
