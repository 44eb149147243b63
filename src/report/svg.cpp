#include "report/svg.h"

#include <cmath>
#include <cstdio>

namespace mt::svg {

namespace {

// Shortest form to 0.1 px: "12", "12.5", never "12.0" or exponents.
std::string num(double v) {
  char buf[32];
  const double rounded = std::round(v * 10) / 10;
  std::snprintf(buf, sizeof buf, rounded == std::round(rounded) ? "%.0f" : "%.1f", rounded);
  return std::string(buf) == "-0" ? "0" : buf;
}

std::string paint_attributes(const Paint& p) {
  std::string a = " fill=\"" + p.fill + "\"";
  if (p.stroke != "none") {
    a += " stroke=\"" + p.stroke + "\" stroke-width=\"" + num(p.stroke_width) + "\"";
    if (p.dashed) a += " stroke-dasharray=\"5,4\"";
  }
  return a;
}

std::string points_attribute(const Points& points) {
  std::string s;
  for (const auto& [x, y] : points) {
    if (!s.empty()) s += ' ';
    s.append(num(x)).append(",").append(num(y));
  }
  return s;
}

}  // namespace

std::string escape(std::string_view text) {
  std::string out;
  for (char ch : text) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

Document::Document(double width, double height) : width_(width), height_(height) {}

void Document::rect(double x, double y, double w, double h, const Paint& paint) {
  body_ << "<rect x=\"" << num(x) << "\" y=\"" << num(y) << "\" width=\"" << num(w) << "\" height=\""
        << num(h) << "\"" << paint_attributes(paint) << "/>\n";
}

void Document::line(double x1, double y1, double x2, double y2, const Paint& paint) {
  body_ << "<line x1=\"" << num(x1) << "\" y1=\"" << num(y1) << "\" x2=\"" << num(x2) << "\" y2=\"" << num(y2)
        << "\"" << paint_attributes(paint) << "/>\n";
}

void Document::polygon(const Points& points, const Paint& paint) {
  body_ << "<polygon points=\"" << points_attribute(points) << "\"" << paint_attributes(paint) << "/>\n";
}

void Document::polyline(const Points& points, const Paint& paint) {
  body_ << "<polyline points=\"" << points_attribute(points) << "\"" << paint_attributes(paint) << "/>\n";
}

void Document::circle(double x, double y, double r, const Paint& paint) {
  body_ << "<circle cx=\"" << num(x) << "\" cy=\"" << num(y) << "\" r=\"" << num(r) << "\""
        << paint_attributes(paint) << "/>\n";
}

void Document::text(double x, double y, std::string_view text, const Font& font) {
  body_ << "<text x=\"" << num(x) << "\" y=\"" << num(y) << "\" font-size=\"" << num(font.size) << "\"";
  if (font.anchor != "start") body_ << " text-anchor=\"" << font.anchor << "\"";
  if (font.bold) body_ << " font-weight=\"bold\"";
  if (font.fill != "#222") body_ << " fill=\"" << font.fill << "\"";
  if (font.halo) body_ << " stroke=\"white\" stroke-width=\"4\" paint-order=\"stroke\"";
  if (font.rotate != 0)
    body_ << " transform=\"rotate(" << num(font.rotate) << " " << num(x) << " " << num(y) << ")\"";
  body_ << ">" << escape(text) << "</text>\n";
}

std::string Document::str() const {
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(width_) << "\" height=\"" << num(height_)
      << "\" viewBox=\"0 0 " << num(width_) << " " << num(height_)
      << "\" font-family=\"Helvetica, Arial, sans-serif\" fill=\"#222\">\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      << body_.str() << "</svg>\n";
  return out.str();
}

}  // namespace mt::svg
