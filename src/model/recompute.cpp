#include "model/recompute.h"

#include "core/error.h"

namespace mt {

RecomputeConfig parse_recompute(const std::string& granularity, const std::string& method, int64_t num_layers,
                                bool recompute_activations) {
  RecomputeConfig c;
  const std::string selective(kRecomputeGranularityNames.name(RecomputeGranularity::selective));
  if (recompute_activations && !granularity.empty() && granularity != selective)
    fail_usage("--recompute-activations means --recompute-granularity selective, not " + granularity);
  const std::string g = recompute_activations ? selective : granularity;
  if (!g.empty()) c.granularity = kRecomputeGranularityNames.parse_or_fail("--recompute-granularity", g);
  const bool full = c.granularity == RecomputeGranularity::full;
  if (!method.empty() && !full) fail_usage("--recompute-method needs --recompute-granularity full");
  if (num_layers != 0 && !full) fail_usage("--recompute-num-layers needs --recompute-granularity full");
  if (!method.empty()) c.method = kRecomputeMethodNames.parse_or_fail("--recompute-method", method);
  if (num_layers < 0) fail_usage("--recompute-num-layers must be positive");
  if (num_layers != 0) c.num_layers = num_layers;
  return c;
}

std::string recompute_name(const RecomputeConfig& c) {
  if (c.granularity != RecomputeGranularity::full)
    return c.granularity == RecomputeGranularity::none
               ? "none"
               : std::string(kRecomputeGranularityNames.name(c.granularity));
  return "full, " + std::string(kRecomputeMethodNames.name(c.method)) + ", " + std::to_string(c.num_layers) +
         " layer" + (c.num_layers == 1 ? "" : "s");
}

std::vector<int64_t> full_recompute_groups(const RecomputeConfig& c, int64_t n_layer) {
  std::vector<int64_t> group(n_layer, -1);
  if (c.granularity != RecomputeGranularity::full) return group;
  if (c.num_layers < 1 || c.num_layers > n_layer)
    fail_usage("--recompute-num-layers " + std::to_string(c.num_layers) +
               " must be between 1 and the model's " + std::to_string(n_layer) + " layers");
  for (int64_t l = 0; l < n_layer; ++l) {
    if (c.method == RecomputeMethod::uniform)
      group[l] = l / c.num_layers * c.num_layers;  // the last group may be shorter
    else if (l < c.num_layers)
      group[l] = l;
  }
  return group;
}

}  // namespace mt
