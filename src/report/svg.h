// A small SVG writer: the rectangles, lines, polygons and text the run report draws. Coordinates are written
// to 0.1 px, which keeps pictures of a few hundred ops small enough to commit.
#pragma once

#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mt::svg {

struct Paint {
  std::string fill = "none";
  std::string stroke = "none";
  double stroke_width = 1;
  bool dashed = false;
};

struct Font {
  double size = 11;
  std::string anchor = "start";  // start, middle or end
  double rotate = 0;             // degrees, about the text's anchor point
  bool bold = false;
  std::string fill = "#222";
  bool halo = false;  // a white outline, so that lines under the text do not cross it
};

using Points = std::vector<std::pair<double, double>>;

class Document {
 public:
  Document(double width, double height);

  void rect(double x, double y, double w, double h, const Paint& paint);
  void line(double x1, double y1, double x2, double y2, const Paint& paint);
  void polygon(const Points& points, const Paint& paint);
  void polyline(const Points& points, const Paint& paint);
  void circle(double x, double y, double r, const Paint& paint);
  void text(double x, double y, std::string_view text, const Font& font = {});

  std::string str() const;  // the whole document, with the XML declaration

 private:
  double width_, height_;
  std::ostringstream body_;
};

// Text with &, <, >, " and ' as XML entities.
std::string escape(std::string_view text);

}  // namespace mt::svg
