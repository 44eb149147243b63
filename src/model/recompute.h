// Activation recompute (Megatron's flags): which activations a layer keeps from its forward for its backward,
// and which it drops and recomputes just before they are needed.
//   selective: every layer recomputes its cheap elementwise outputs: the two LayerNorm (LLaMA: RMSNorm)
//     outputs (and their statistics) and the GELU (SwiGLU) output. It keeps the products' and attention's
//     outputs (qkv, attention out, the residual after attention, the MLP pre-activation) and the layer input,
//     which cost a matrix product or an attention pass to remake.
//   full + uniform N: layers in groups of N; each group keeps only its input and reruns the whole forward of
//     the group before the group's backward.
//   full + block N: the first N layers each keep only their input and rerun their forward; the rest keep all.
// Recomputed tensors are new tensors of the table, so the Plan packs their lifetimes like any other.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/names.h"

namespace mt {

enum class RecomputeGranularity { none, selective, full };
enum class RecomputeMethod { uniform, block };
// The names the flags take; no recompute is the absence of --recompute-granularity.
inline constexpr auto kRecomputeGranularityNames = name_table(
    std::pair{RecomputeGranularity::selective, "selective"}, std::pair{RecomputeGranularity::full, "full"});
inline constexpr auto kRecomputeMethodNames =
    name_table(std::pair{RecomputeMethod::uniform, "uniform"}, std::pair{RecomputeMethod::block, "block"});

struct RecomputeConfig {
  RecomputeGranularity granularity = RecomputeGranularity::none;
  RecomputeMethod method = RecomputeMethod::uniform;
  int64_t num_layers = 1;
};

// Flags as given on the command line (empty or 0 when absent); usage errors for unknown names and for method
// or layer counts without full recompute.
RecomputeConfig parse_recompute(const std::string& granularity, const std::string& method, int64_t num_layers,
                                bool recompute_activations);
std::string recompute_name(const RecomputeConfig& config);

// Per layer: the first layer of its recompute group, or -1 when the layer keeps all its activations.
// Usage error when N is not in [1, n_layer].
std::vector<int64_t> full_recompute_groups(const RecomputeConfig& config, int64_t n_layer);

}  // namespace mt
