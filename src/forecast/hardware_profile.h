// What the cost model needs to know about a machine: the rates of the kernels a step runs (linear layers'
// products forward and backward per dtype, weight size and rows, attention, the LM head, the elementwise
// kernels, AdamW), memory, MPI and disk bandwidth, at one ISA level and thread count. `memtrain calibrate`
// measures one (forecast/calibrate.h); without one the planner takes a profile shipped in profiles/
// (forecast/shipped_profiles.h), so a ranking still comes out.
#pragma once

#include <array>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "core/cpu_isa.h"
#include "core/dtype.h"
#include "devices/devices.h"

namespace mt {

// Linear layers by the size of their weight, whose representative (in x out) calibrate times: small 384 x
// 384, medium 768 x 768, large 768 x 3072; a weight belongs to the class nearest in sqrt(in * out).
enum class ShapeClass { small, medium, large };
constexpr int kNumShapeClasses = 3;
constexpr std::array<ShapeClass, kNumShapeClasses> kAllShapeClasses = {ShapeClass::small, ShapeClass::medium,
                                                                       ShapeClass::large};
std::string shape_class_name(ShapeClass c);
ShapeClass weight_class(int64_t n_in, int64_t n_out);

// The rows (tokens of a micro-batch) at which the linear kernels are timed.
constexpr int kNumLinearRows = 3;
constexpr std::array<int64_t, kNumLinearRows> kLinearRows = {512, 1024, 2048};

// A linear kernel's GFLOP/s by weight class and rows. Fewer rows run slower per row: every call also reads
// the weight (forward) or reads and writes its fp32 gradient (backward), whatever the rows, and small
// products keep the cores less busy; so small micro-batches cost more per token.
struct LinearCurve {
  std::array<std::array<double, kNumLinearRows>, kNumShapeClasses> gflops{};
  // The rate at `rows`: interpolated in log(rows) between the timed rows, held at the end ones beyond.
  double at(ShapeClass c, int64_t rows) const;
};

// Forward: one product, bias added; backward: the input's gradient and the weight's, accumulated into fp32.
struct LinearRates {
  LinearCurve forward, backward;
};

// AdamW parameter updates per second, in millions, by how the moments are stored: fp32, bf16 (O2), and 8-bit
// block-quantized (backend/cpu/adamw_8bit.h). The 8-bit rates are absent from profiles calibrated before
// memtrain had them; the cost model then takes the shipped profile's of the same level and threads, as it
// does for MPI.
struct AdamWRates {
  double fp32_moments = 0, bf16_moments = 0;
  std::optional<double> fp8_moments, int8_moments;

  // The rate for moments stored as `moments` (ModelStatePolicy::moments: f32, bf16, f8_e4m3 or u8).
  std::optional<double> of(DType moments) const;
};

struct HardwareProfile {
  std::string source;  // "calibrate", the file it was read from, or "built-in profiles/..." (shipped)
  CpuIsa cpu_isa = CpuIsa::generic;  // the level the kernels ran at (process_cpu_isa())
  int threads = 1;                   // OpenMP threads the rates were measured with
  std::string cpu_model;             // the CPU's name (forecast/cpu_model.h)
  std::string notes;                 // how it was measured, when a person says so
  LinearRates fp32, bf16;
  // Per dtype: [0] fp32 storage, [1] 16-bit storage.
  // The attention kernels' forward + backward, causal FLOPs per second (not a GEMM: blocked, with softmax).
  std::array<double, 2> attention_gflops{};
  // The LM head with its loss (backend/cpu/lm_head.h) in training: its three products' FLOPs per second, the
  // softmax and the logits' traffic included.
  std::array<double, 2> lm_head_gflops{};
  AdamWRates adamw_mparams;
  // Elementwise kernels, million elements of the forward's output per second, forward and backward alike:
  // the norms (LayerNorm, RMSNorm) and the activations (GELU, SwiGLU, RoPE).
  double norm_melems = 0, activation_melems = 0;
  double memory_gbps = 0;  // streaming read + write bandwidth, GB/s (1e9 bytes)
  // Between ranks, both absent when not measured under mpirun: all-reduce bus bandwidth, and the share of an
  // exchange hidden when it runs beside the kernels (1 all, 0 none, below 0 when together they slow each
  // other).
  std::optional<double> mpi_gbps, comm_overlap;
  double disk_gbps = 0;  // sequential write + read of the offload directory

  // bf16 products have their own rate (without AVX512-BF16, that of its products through fp32 conversion
  // tiles); fp16 ones run as fp32 on a CPU (backend/cpu/matmul.h) and at bf16's rate on a GPU's tensor cores,
  // which a profile derived from a GPU's (hardware_profile_of) says here.
  bool f16_at_bf16_rate = false;
  const LinearRates& linear(DType inputs) const {
    return inputs == DType::bf16 || (inputs == DType::f16 && f16_at_bf16_rate) ? bf16 : fp32;
  }
  double attention(bool sixteen_bit) const { return attention_gflops[sixteen_bit ? 1 : 0]; }
  double lm_head(bool sixteen_bit) const { return lm_head_gflops[sixteen_bit ? 1 : 0]; }
};

nlohmann::json hardware_profile_json(const HardwareProfile& profile);
// The profile in `text`; a data error starting with `what` (the flag and file) for a missing key, an unknown
// ISA level or a rate that is not positive. Its source is `what`.
HardwareProfile parse_hardware_profile(const std::string& text, const std::string& what);
// Data error naming the file for a missing file or what parse_hardware_profile rejects.
HardwareProfile load_hardware_profile(const std::string& path);

}  // namespace mt
