#include "model/pipeline_schedule.h"

#include <algorithm>

namespace mt {

std::vector<PipelinePass> one_f_one_b(int stages, int stage, int64_t micro_batches) {
  const int64_t warmup = std::min<int64_t>(stages - stage - 1, micro_batches);
  std::vector<PipelinePass> passes;
  for (int64_t i = 0; i < warmup; ++i) passes.push_back({.forward = true, .micro_batch = i});
  for (int64_t i = 0; i < micro_batches - warmup; ++i) {
    passes.push_back({.forward = true, .micro_batch = warmup + i});
    passes.push_back({.forward = false, .micro_batch = i});
  }
  for (int64_t i = micro_batches - warmup; i < micro_batches; ++i)
    passes.push_back({.forward = false, .micro_batch = i});
  return passes;
}

int64_t micro_batches_in_flight(int stages, int stage, int64_t micro_batches) {
  return std::min<int64_t>(stages - stage, micro_batches);
}

double pipeline_bubble_fraction(int stages, int64_t micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace mt
