#include "report/run_report.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "core/error.h"
#include "io/json_lines.h"
#include "memory/report.h"
#include "report/axes.h"
#include "report/svg.h"

namespace mt {

namespace {

// The picture's frame: both panels share the x extent; the right margin holds the legends.
constexpr double kWidth = 1100, kHeight = 810;
constexpr double kLeft = 80, kRight = 820, kLegend = 845;
constexpr double kMemTop = 84, kMemBottom = 404;  // memory panel; op names hang below it
constexpr double kLossTop = 570, kLossBottom = 750;

// Stacked bottom to top: what lives all step first, so the bands that change sit on a flat base.
constexpr Category kStackOrder[] = {Category::frozen, Category::params,      Category::master,
                                    Category::grads,  Category::optim,       Category::other,
                                    Category::comm,   Category::activations, Category::workspace};

const char* color(Category c) {
  switch (c) {
    case Category::params:
      return "#4e79a7";
    case Category::frozen:
      return "#bab0ac";
    case Category::master:
      return "#a0cbe8";
    case Category::grads:
      return "#f28e2b";
    case Category::optim:
      return "#ffbe7d";
    case Category::activations:
      return "#59a14f";
    case Category::workspace:
      return "#e15759";
    case Category::comm:
      return "#b07aa1";
    case Category::other:
      return "#9c755f";
  }
  return "#bab0ac";
}

using plot::format;
using plot::nice_step;
using plot::ticks;

// Drops points that repeat the last one or sit inside a straight horizontal or vertical run: a band that
// holds the same bytes for a hundred ops becomes one rectangle.
svg::Points simplify(const svg::Points& in) {
  svg::Points out;
  for (const auto& p : in) {
    if (!out.empty() && out.back() == p) continue;
    if (out.size() >= 2) {
      const auto& a = out[out.size() - 2];
      const auto& b = out.back();
      if ((a.first == b.first && b.first == p.first) || (a.second == b.second && b.second == p.second))
        out.pop_back();
    }
    out.push_back(p);
  }
  return out;
}

// Legend: the categories as they appear top to bottom, each with its peak over the step, the total at the
// peak op and the plan.
void draw_memory_legend(svg::Document& doc, const MemoryTimeline& t, const TimelinePoint& peak) {
  double y = kMemTop + 4;
  doc.text(kLegend, y, "category", {.size = 11, .bold = true});
  doc.text(kWidth - 15, y, "peak", {.size = 11, .anchor = "end", .bold = true});
  for (auto it = std::rbegin(kStackOrder); it != std::rend(kStackOrder); ++it) {
    int64_t most = 0;
    for (const TimelinePoint& p : t.points) most = std::max(most, p.live[*it]);
    if (most == 0) continue;
    y += 20;
    doc.rect(kLegend, y - 10, 12, 12, {.fill = color(*it)});
    doc.text(kLegend + 18, y, category_title(*it), {.size = 11});
    doc.text(kWidth - 15, y, human_bytes(most), {.size = 11, .anchor = "end"});
  }
  y += 26;
  doc.text(kLegend, y, "total at the peak", {.size = 11});
  doc.text(kWidth - 15, y, human_bytes(peak.live.total()), {.size = 11, .anchor = "end", .bold = true});
  y += 20;
  doc.line(kLegend, y - 4, kLegend + 12, y - 4, {.stroke = "#333", .stroke_width = 1.2, .dashed = true});
  doc.text(kLegend + 18, y, "plan (arenas packed)", {.size = 11});
  doc.text(kWidth - 15, y, human_bytes(t.planned.total()), {.size = 11, .anchor = "end"});
}

void draw_memory_panel(svg::Document& doc, const MemoryTimeline& t) {
  const int n = static_cast<int>(t.points.size());
  const double dx = (kRight - kLeft) / n;
  const auto x_at = [&](int i) { return kLeft + i * dx; };
  const TimelinePoint& peak = t.points[t.peak_point()];
  // Room above the higher of peak and plan for the peak's label; at least 1 KiB, so the axis has a height.
  const double top_bytes =
      static_cast<double>(std::max<int64_t>({peak.live.total(), t.planned.total(), 1024})) * 1.12;

  // The y axis in the unit that keeps tick labels short.
  const double unit = top_bytes >= 1 << 30 ? 1 << 30 : top_bytes >= 1 << 20 ? 1 << 20 : 1 << 10;
  const char* unit_name = unit == 1 << 30 ? "GiB" : unit == 1 << 20 ? "MiB" : "KiB";
  const double step = nice_step(top_bytes / unit, 5);
  const double y_max = std::ceil(top_bytes / unit / step) * step * unit;
  const auto y_at = [&](double bytes) { return kMemBottom - bytes / y_max * (kMemBottom - kMemTop); };
  for (double v : ticks(0, y_max / unit, step)) {
    const double y = y_at(v * unit);
    doc.line(kLeft, y, kRight, y, {.stroke = "#e4e4e4"});
    doc.text(kLeft - 6, y + 4, format("%g ", v) + unit_name, {.size = 10, .anchor = "end"});
  }

  // Forward and backward either side of the loss op; drawn first, so the stack hides the line.
  if (t.loss_op >= 0 && t.loss_op < n) {
    const double x = x_at(t.loss_op) + dx / 2;
    doc.line(x, kMemTop - 14, x, kMemBottom, {.stroke = "#555", .dashed = true});
    doc.text(x - 6, kMemTop - 6, "\u2190 forward", {.size = 11, .anchor = "end"});
    doc.text(x + 6, kMemTop - 6, "backward \u2192", {.size = 11});
  }

  // One step polygon per category between the running sum below it and that sum plus its bytes.
  std::vector<double> base(n, 0.0);
  for (Category c : kStackOrder) {
    if (std::none_of(t.points.begin(), t.points.end(), [&](const TimelinePoint& p) { return p.live[c] > 0; }))
      continue;
    svg::Points outline;
    for (int i = 0; i < n; ++i) {
      const double y = y_at(base[i] + static_cast<double>(t.points[i].live[c]));
      outline.insert(outline.end(), {{x_at(i), y}, {x_at(i + 1), y}});
    }
    for (int i = n - 1; i >= 0; --i) {
      outline.insert(outline.end(), {{x_at(i + 1), y_at(base[i])}, {x_at(i), y_at(base[i])}});
      base[i] += static_cast<double>(t.points[i].live[c]);
    }
    doc.polygon(simplify(outline), {.fill = color(c)});
  }
  doc.rect(kLeft, kMemTop, kRight - kLeft, kMemBottom - kMemTop, {.stroke = "#888"});

  // The plan: what the allocation reserves. The gap above the peak is reserved but never used all at once:
  // holes the packing left, and arenas sized for their own peaks at different ops.
  const double plan_y = y_at(static_cast<double>(t.planned.total()));
  doc.line(kLeft, plan_y, kRight, plan_y, {.stroke = "#333", .stroke_width = 1.2, .dashed = true});
  doc.text(kRight - 4, plan_y - 5, "plan " + human_bytes(t.planned.total()),
           {.size = 10, .anchor = "end", .halo = true});

  // The peak op, labelled above its stack.
  const double px = x_at(t.peak_point()) + dx / 2, py = y_at(static_cast<double>(peak.live.total()));
  doc.line(px, py - 3, px, py - 16, {.stroke = "#111", .stroke_width = 1.5});
  const std::string anchor = px < kLeft + 150 ? "start" : px > kRight - 150 ? "end" : "middle";
  doc.text(px, py - 20, "peak " + human_bytes(peak.live.total()) + " during " + peak.name,
           {.size = 11, .anchor = anchor, .bold = true, .halo = true});

  // Op names under their bands, thinned to one every k ops so that they do not overlap.
  const int k = std::max(1, static_cast<int>(std::ceil(n / std::floor((kRight - kLeft) / 11))));
  for (int i = 0; i < n; i += k) {
    const double x = x_at(i) + dx / 2;
    doc.line(x, kMemBottom, x, kMemBottom + 4, {.stroke = "#888"});
    doc.text(x + 3, kMemBottom + 9, t.points[i].name, {.size = 9, .anchor = "end", .rotate = -60});
  }
  doc.text(22, (kMemTop + kMemBottom) / 2, "bytes held", {.size = 12, .anchor = "middle", .rotate = -90});

  draw_memory_legend(doc, t, peak);
}

void draw_loss_panel(svg::Document& doc, const LossCurve& loss) {
  plot::Extent extent;
  for (const auto* series : {&loss.train, &loss.val})
    for (const auto& [step, value] : *series) extent.add(static_cast<double>(step), value);
  const plot::Frame frame = plot::fit_frame(kLeft, kRight, kLossTop, kLossBottom, extent);
  plot::draw_frame(doc, frame);

  svg::Points train;
  for (const auto& [step, value] : loss.train) train.push_back({frame.x(step), frame.y(value)});
  if (train.size() == 1)
    doc.circle(train[0].first, train[0].second, 2.5, {.fill = "#4e79a7"});
  else
    doc.polyline(train, {.stroke = "#4e79a7", .stroke_width = 1.5});
  for (const auto& [step, value] : loss.val)
    doc.circle(frame.x(step), frame.y(value), 3.5, {.fill = "#e15759", .stroke = "white"});

  doc.text(kLeft, kLossTop - 10, "loss", {.size = 13, .bold = true});
  doc.text((kLeft + kRight) / 2, kLossBottom + 34, "step", {.size = 12, .anchor = "middle"});
  doc.text(22, (kLossTop + kLossBottom) / 2, "cross-entropy",
           {.size = 12, .anchor = "middle", .rotate = -90});

  double y = kLossTop + 4;
  doc.line(kLegend, y - 4, kLegend + 14, y - 4, {.stroke = "#4e79a7", .stroke_width = 2});
  doc.text(kLegend + 20, y, "train", {.size = 11});
  doc.text(kWidth - 15, y, format("%.4f", loss.train.back().second), {.size = 11, .anchor = "end"});
  if (!loss.val.empty()) {
    y += 20;
    doc.circle(kLegend + 7, y - 4, 3.5, {.fill = "#e15759"});
    doc.text(kLegend + 20, y, "validation", {.size = 11});
    doc.text(kWidth - 15, y, format("%.4f", loss.val.back().second), {.size = 11, .anchor = "end"});
  }
  doc.text(kLegend, y + 20, "(last values)", {.size = 10, .fill = "#777"});
}

}  // namespace

LossCurve read_loss_curve(const std::string& path) {
  if (!std::filesystem::exists(path)) fail_data(path + ": cannot open: " + std::strerror(ENOENT));
  const JsonLines file = read_json_lines(path);
  LossCurve curve;
  curve.torn_line = file.torn_line;
  for (size_t i = 0; i < file.values.size(); ++i) {
    const nlohmann::json& record = file.values[i];
    try {
      const int64_t step = record.at("step").get<int64_t>();
      // A non-finite loss is written as null (fp16 overflows); such steps have no point to draw.
      if (record.at("loss").is_number()) curve.train.push_back({step, record["loss"].get<double>()});
      if (record.contains("val_loss") && record["val_loss"].is_number())
        curve.val.push_back({step, record["val_loss"].get<double>()});
    } catch (const nlohmann::json::exception& e) {
      fail_data(path + ": record " + std::to_string(i + 1) + ": not a metrics record: " + e.what());
    }
  }
  if (curve.train.empty()) fail_data(path + ": no logged steps with a loss");
  return curve;
}

std::string draw_run_report(const MemoryTimeline& timeline, const LossCurve& loss) {
  if (timeline.points.empty() || loss.train.empty()) throw std::logic_error("run report: nothing to draw");
  svg::Document doc(kWidth, kHeight);
  doc.text(kLeft, 28, "memtrain: " + timeline.run, {.size = 17, .bold = true});
  doc.text(kLeft, 48,
           "memory held while each op of training step 1 runs (its inputs, outputs and scratch bound), "
           "stacked by category",
           {.size = 12, .fill = "#555"});
  draw_memory_panel(doc, timeline);
  draw_loss_panel(doc, loss);
  return doc.str();
}

}  // namespace mt
