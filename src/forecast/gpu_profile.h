// What a plan for a GPU knows of the card without one at hand: its memory, the runtime's own use of it (the
// CUDA context, kernel images and library handles, which no plan holds), and its peak rates. One per card in
// profiles/gpu/, written by hand from published figures, or measured on the card by `memtrain calibrate
// --device cuda`; `source` says which. `estimate` and `plan` read one through `--device cuda --gpu
// NAME|FILE`.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "forecast/hardware_profile.h"

namespace mt {

struct GpuProfile {
  std::string gpu;     // the --gpu name: "h100"
  std::string name;    // the card, as the driver names it
  std::string source;  // "published" (by hand), or "calibrate" (measured on the card)
  std::string notes;
  int64_t memory_bytes = 0;            // the card's memory, as the driver reports its total
  int64_t runtime_overhead_bytes = 0;  // device memory the CUDA runtime and libraries take before any plan
  double bf16_tflops = 0, tf32_tflops = 0, fp32_tflops = 0;  // dense peaks
  double memory_gbps = 0;                                    // 1e9 bytes per second
};

// The shipped profiles (profiles/gpu/*.json, built in), parsed once.
const std::vector<GpuProfile>& shipped_gpu_profiles();
// `gpu` as --gpu takes it: a shipped profile's name, or the path of a profile file (a value with a '/' or
// ending in .json), read through the shipped ones' parser. A usage error naming `flag` and the choices for
// an unknown name; a data error naming `flag` and the file for one that cannot be read or is not a profile.
GpuProfile gpu_profile(const std::string& gpu, const std::string& flag);
// "h100, h200, a100-80gb"
std::string gpu_profile_names();
// The usage error for --gpu `gpu` given to a plan for the CPU.
[[noreturn]] void fail_gpu_without_cuda(const std::string& gpu);

// The profile as its file holds it (profiles/gpu/*.json's format).
nlohmann::ordered_json gpu_profile_json(const GpuProfile& profile);

// The cost model's rates for a plan on the card, from the profile's peaks: linear layers at the dense peak of
// their dtype, attention and the LM head at that product peak too, elementwise kernels and AdamW at the
// memory bandwidth over the bytes each element moves. Peaks are what no step reaches, so the tokens/s a plan
// predicts with it are upper bounds, and its ranking leans towards more arithmetic (recompute) over more
// memory traffic. `host` (the CPU's profile) gives what the host does: MPI and disk.
HardwareProfile hardware_profile_of(const GpuProfile& gpu, const HardwareProfile& host);
// plan's "hardware profile:" line for it.
std::string describe_gpu_rates(const GpuProfile& gpu);

}  // namespace mt
