// What a plan for a GPU knows of the card without one at hand: its memory, the runtime's own use of it (the
// CUDA context, kernel images and library handles, which no plan holds), and its published peak rates. One
// per card in profiles/gpu/, written by hand from published figures until `calibrate` measures them on the
// card; `source` says which. `estimate --device cuda --gpu NAME` reads one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
// The one named `gpu`; a usage error naming `flag` and the choices otherwise.
const GpuProfile& gpu_profile(const std::string& gpu, const std::string& flag);
// "h100, h200, a100-80gb"
std::string gpu_profile_names();

}  // namespace mt
