#include "core/units.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <utility>

namespace mt {

std::optional<int64_t> parse_bytes(const std::string& text) {
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},      {"B", 1},        {"KB", 1e3},        {"MB", 1e6},           {"GB", 1e9},
      {"TB", 1e12}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  const char* begin = text.c_str();
  if (text.empty() || !(std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '.'))
    return std::nullopt;
  char* end = nullptr;
  const double number = std::strtod(begin, &end);
  if (end == begin || !std::isfinite(number)) return std::nullopt;
  std::string unit(end);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    const double bytes = number * scale;
    if (bytes >= 9.2e18) return std::nullopt;
    // Integer arithmetic where the number is whole, so that "80GiB" is exactly 80 * 2^30.
    const double whole = std::floor(number);
    if (whole == number && whole < 9.2e18 / scale)
      return static_cast<int64_t>(whole) * static_cast<int64_t>(scale);
    return static_cast<int64_t>(bytes);
  }
  return std::nullopt;
}

}  // namespace mt
