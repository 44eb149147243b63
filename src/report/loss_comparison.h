// Several runs' losses in one SVG picture, for runs that differ in one setting (the precision, Adam's moment
// dtype): the training loss of each, averaged over a window of steps so that noisy curves stay apart; the
// validation losses; and each run's validation loss relative to the first run's.
#pragma once

#include <string>
#include <vector>

#include "report/run_report.h"

namespace mt {

struct NamedLossCurve {
  std::string name;  // the legend's
  LossCurve loss;
};

using StepSeries = std::vector<std::pair<int64_t, double>>;

// At each point, the mean of the values of the `window` points up to and including it (fewer at the start).
StepSeries moving_mean(const StepSeries& series, int window);

// Each run's validation losses relative to the reference's at the steps both evaluated, in percent.
StepSeries relative_percent(const StepSeries& values, const StepSeries& reference);

// The SVG document: at least one run, each with at least one step. The first run is the reference of the
// relative panel, which is left out when no other run evaluated at a step where the first did.
std::string draw_loss_comparison(const std::string& title, const std::vector<NamedLossCurve>& runs,
                                 int window);

}  // namespace mt
