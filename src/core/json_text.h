// What a JSON file a user hands us says when it does not parse, in the words of our one-line errors.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace mt {

// The parser's reason without its exception tag ("[json.exception.parse_error.101] "), a number out of a
// double's range (1e400) said as such.
std::string json_error_text(const nlohmann::json::exception& e);

// `text` as JSON; a usage error (`usage`) or data error naming `what` (the flag and file), the line and the
// reason when it does not parse, a number out of range included.
nlohmann::json parse_json_text(const std::string& text, const std::string& what, bool usage);

}  // namespace mt
