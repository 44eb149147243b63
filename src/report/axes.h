// What the report's loss panels share: round tick steps, the ticks in a range, the extent of the points to
// draw, and a frame that maps (step, value) to pixels and draws its grid, tick labels and border.
#pragma once

#include <limits>
#include <string>
#include <vector>

#include "report/svg.h"

namespace mt::plot {

// A tick spacing of 1, 2, 2.5 or 5 times a power of ten giving about `target` intervals over range.
double nice_step(double range, int target);

// Multiples of step in [lo, hi], each computed afresh so that no rounding accumulates
// ("0.30000000000000004").
std::vector<double> ticks(double lo, double hi, double step);

// printf of one double into a string.
std::string format(const char* fmt, double v);

// The smallest box holding every point added: steps on x, values on y.
struct Extent {
  double first = std::numeric_limits<double>::infinity(), last = -first;
  double lo = first, hi = -first;
  void add(double step, double value);
};

// Pixels [left, right] x [top, bottom] showing steps [x0, x1] and values [y0, y1], gridded every y_step.
struct Frame {
  double left, right, top, bottom;
  double x0, x1, y0, y1, y_step;
  double x(double step) const { return left + (step - x0) / (x1 - x0) * (right - left); }
  double y(double value) const { return bottom - (value - y0) / (y1 - y0) * (bottom - top); }
};

// The frame for `extent` in those pixels: 8% of room above and below the values, rounded out to a round step
// of about four intervals. A single step or a flat curve still gets axes of some width.
Frame fit_frame(double left, double right, double top, double bottom, const Extent& extent);

// The y grid lines and their labels (printf's y_format), the x ticks at round steps, and the border.
void draw_frame(svg::Document& doc, const Frame& frame, const char* y_format = "%g");

}  // namespace mt::plot
