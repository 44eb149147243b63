#include "report/loss_comparison.h"

#include <algorithm>
#include <iterator>
#include <map>
#include <stdexcept>

#include "report/axes.h"
#include "report/svg.h"

namespace mt {

namespace {

constexpr double kComparisonWidth = 1000, kComparisonLeft = 80, kComparisonRight = 760,
                 kComparisonLegend = 790;
struct PanelRows {
  double top, bottom;
};
constexpr PanelRows kTrainRows{70, 270}, kValRows{330, 530}, kRelativeRows{590, 740};
constexpr double kBelowPanel = 60;  // the step labels and the axis title under the lowest panel

// Tableau's ten, in order; runs past ten reuse them.
constexpr const char* kColors[] = {"#4e79a7", "#e15759", "#59a14f", "#f28e2b", "#b07aa1",
                                   "#76b7b2", "#edc948", "#ff9da7", "#9c755f", "#bab0ac"};

const char* color_of(size_t run) {
  return kColors[run % std::size(kColors)];
}

// One panel: the series of every run over the steps every panel shows, dots where dots is set (sparse
// validation points).
void draw_panel(svg::Document& doc, const std::string& title, PanelRows rows, const plot::Extent& steps,
                const std::vector<StepSeries>& series, bool dots, const char* y_format) {
  plot::Extent extent;
  for (const StepSeries& s : series)
    for (const auto& [step, value] : s) extent.add(static_cast<double>(step), value);
  extent.first = steps.first;
  extent.last = steps.last;
  const plot::Frame frame = plot::fit_frame(kComparisonLeft, kComparisonRight, rows.top, rows.bottom, extent);
  plot::draw_frame(doc, frame, y_format);
  doc.text(kComparisonLeft, rows.top - 10, title, {.size = 13, .bold = true});
  for (size_t run = 0; run < series.size(); ++run) {
    svg::Points points;
    for (const auto& [step, value] : series[run]) points.push_back({frame.x(step), frame.y(value)});
    if (points.size() > 1) doc.polyline(points, {.stroke = color_of(run), .stroke_width = 1.5});
    if (dots || points.size() == 1)
      for (const auto& [x, y] : points) doc.circle(x, y, 2.5, {.fill = color_of(run)});
  }
}

// Each run's colour and name, its last validation loss (its last training loss where it never evaluated) and
// that loss relative to the first run's.
void draw_legend(svg::Document& doc, const std::vector<NamedLossCurve>& runs) {
  const auto last = [](const LossCurve& c) { return (c.val.empty() ? c.train : c.val).back().second; };
  double y = kTrainRows.top + 4;
  doc.text(kComparisonLegend, y, "run", {.size = 11, .bold = true});
  doc.text(kComparisonWidth - 80, y, "last loss", {.size = 11, .anchor = "end", .bold = true});
  doc.text(kComparisonWidth - 15, y, "vs first", {.size = 11, .anchor = "end", .bold = true});
  for (size_t run = 0; run < runs.size(); ++run) {
    y += 20;
    doc.line(kComparisonLegend, y - 4, kComparisonLegend + 14, y - 4,
             {.stroke = color_of(run), .stroke_width = 2.5});
    doc.text(kComparisonLegend + 20, y, runs[run].name, {.size = 11});
    const double loss = last(runs[run].loss), reference = last(runs[0].loss);
    doc.text(kComparisonWidth - 80, y, plot::format("%.4f", loss), {.size = 11, .anchor = "end"});
    if (run > 0)
      doc.text(kComparisonWidth - 15, y, plot::format("%+.2f%%", (loss / reference - 1) * 100),
               {.size = 11, .anchor = "end"});
  }
  doc.text(kComparisonLegend, y + 20, "(validation where the run evaluated)", {.size = 10, .fill = "#777"});
}

}  // namespace

StepSeries moving_mean(const StepSeries& series, int window) {
  StepSeries out;
  double sum = 0;
  for (size_t i = 0; i < series.size(); ++i) {
    sum += series[i].second;
    if (i >= static_cast<size_t>(window)) sum -= series[i - window].second;
    out.push_back({series[i].first, sum / static_cast<double>(std::min(i + 1, static_cast<size_t>(window)))});
  }
  return out;
}

StepSeries relative_percent(const StepSeries& values, const StepSeries& reference) {
  const std::map<int64_t, double> at(reference.begin(), reference.end());
  StepSeries out;
  for (const auto& [step, value] : values)
    if (const auto it = at.find(step); it != at.end()) out.push_back({step, (value / it->second - 1) * 100});
  return out;
}

std::string draw_loss_comparison(const std::string& title, const std::vector<NamedLossCurve>& runs,
                                 int window) {
  if (runs.empty() || window < 1) throw std::logic_error("loss comparison: nothing to draw");
  std::vector<StepSeries> train, val, relative;
  plot::Extent steps;
  bool any_val = false, any_relative = false;
  for (const NamedLossCurve& run : runs) {
    if (run.loss.train.empty()) throw std::logic_error("loss comparison: " + run.name + " has no steps");
    train.push_back(moving_mean(run.loss.train, window));
    val.push_back(run.loss.val);
    relative.push_back(relative_percent(run.loss.val, runs[0].loss.val));
    for (const auto* series : {&run.loss.train, &run.loss.val})
      for (const auto& [step, value] : *series) steps.add(static_cast<double>(step), value);
    any_val = any_val || !run.loss.val.empty();
    any_relative = any_relative || (&run != &runs[0] && !relative.back().empty());
  }
  const PanelRows lowest = any_relative ? kRelativeRows : any_val ? kValRows : kTrainRows;
  svg::Document doc(kComparisonWidth, lowest.bottom + kBelowPanel);
  doc.text(kComparisonLeft, 28, title, {.size = 17, .bold = true});
  draw_panel(doc, plot::format("training loss (mean of the last %.0f steps)", window), kTrainRows, steps,
             train, false, "%g");
  if (any_val) draw_panel(doc, "validation loss", kValRows, steps, val, true, "%g");
  if (any_relative)
    draw_panel(doc, "validation loss relative to " + runs[0].name, kRelativeRows, steps, relative, true,
               "%+g%%");
  doc.text((kComparisonLeft + kComparisonRight) / 2, lowest.bottom + 34, "step",
           {.size = 12, .anchor = "middle"});
  draw_legend(doc, runs);
  return doc.str();
}

}  // namespace mt
