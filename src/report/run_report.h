// The run report: one SVG picture of a training run. Above, the memory timeline of step 1 as areas stacked
// by category, one band per op, with the plan's total and the peak marked; below, the loss per step and the
// validation losses.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "memory/timeline.h"

namespace mt {

struct LossCurve {
  std::vector<std::pair<int64_t, double>> train;  // (step, loss) of each logged step
  std::vector<std::pair<int64_t, double>> val;    // (step, val_loss) where the run evaluated
  int64_t torn_line = 0;                          // a torn last line of the file, skipped (0: none)
};

// The losses of a metrics.jsonl; a missing file, a malformed line before the last or no steps at all is a
// data error naming the file (and the line). A torn last line is skipped (LossCurve::torn_line).
LossCurve read_loss_curve(const std::string& metrics_path);

// The SVG document; the timeline must have at least one point and the curve at least one step.
std::string draw_run_report(const MemoryTimeline& timeline, const LossCurve& loss);

}  // namespace mt
