#include "core/json_text.h"

#include <algorithm>

#include "core/error.h"

namespace mt {

namespace {

// The line of `text` that holds byte `offset` (1-based lines).
int64_t line_at(const std::string& text, size_t offset) {
  offset = std::min(offset, text.size());
  return 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(offset), '\n');
}

// Where the parser stopped: the byte a parse error names, or the first place of the quoted number an
// out-of-range error names ("number overflow parsing '1e400'"); none found: the end.
size_t error_offset(const std::string& text, const nlohmann::json::exception& e) {
  if (const auto* parse = dynamic_cast<const nlohmann::json::parse_error*>(&e))
    return parse->byte > 0 ? parse->byte - 1 : 0;
  const std::string what = e.what();
  const size_t open = what.find('\''), close = what.rfind('\'');
  if (open == std::string::npos || close <= open) return text.size();
  return std::min(text.find(what.substr(open + 1, close - open - 1)), text.size());
}

}  // namespace

std::string json_error_text(const nlohmann::json::exception& e) {
  std::string text = e.what();
  if (text.starts_with("[json.exception.")) text.erase(0, text.find("] ") + 2);
  if (e.id == 406) text = "a number beyond a double's range (" + text + ")";
  return text;
}

nlohmann::json parse_json_text(const std::string& text, const std::string& what, bool usage) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    const std::string message = what + " line " + std::to_string(line_at(text, error_offset(text, e))) +
                                ": not valid JSON: " + json_error_text(e);
    if (usage) fail_usage(message);
    fail_data(message);
  }
}

}  // namespace mt
