#include "report/axes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mt::plot {

double nice_step(double range, int target) {
  if (!(range > 0)) return 1;
  const double raw = range / target, magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0})
    if (m * magnitude >= raw) return m * magnitude;
  return 10 * magnitude;
}

std::vector<double> ticks(double lo, double hi, double step) {
  std::vector<double> out;
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; ++k)
    out.push_back(k == 0 ? 0 : k * step);
  return out;
}

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

void Extent::add(double step, double value) {
  first = std::min(first, step);
  last = std::max(last, step);
  lo = std::min(lo, value);
  hi = std::max(hi, value);
}

Frame fit_frame(double left, double right, double top, double bottom, const Extent& e) {
  const double x0 = e.first == e.last ? e.first - 1 : e.first, x1 = e.first == e.last ? e.last + 1 : e.last;
  const double pad = e.hi > e.lo ? (e.hi - e.lo) * 0.08 : 0.5;
  const double y_step = nice_step(e.hi - e.lo + 2 * pad, 4);
  return {left,
          right,
          top,
          bottom,
          x0,
          x1,
          std::floor((e.lo - pad) / y_step) * y_step,
          std::ceil((e.hi + pad) / y_step) * y_step,
          y_step};
}

void draw_frame(svg::Document& doc, const Frame& f, const char* y_format) {
  for (double v : ticks(f.y0, f.y1, f.y_step)) {
    doc.line(f.left, f.y(v), f.right, f.y(v), {.stroke = "#e4e4e4"});
    doc.text(f.left - 6, f.y(v) + 4, format(y_format, v), {.size = 10, .anchor = "end"});
  }
  for (double s : ticks(f.x0, f.x1, std::max(1.0, nice_step(f.x1 - f.x0, 8)))) {
    doc.line(f.x(s), f.bottom, f.x(s), f.bottom + 4, {.stroke = "#888"});
    doc.text(f.x(s), f.bottom + 16, format("%.0f", s), {.size = 10, .anchor = "middle"});
  }
  doc.rect(f.left, f.top, f.right - f.left, f.bottom - f.top, {.stroke = "#888"});
}

}  // namespace mt::plot
