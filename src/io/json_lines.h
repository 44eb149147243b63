// JSON Lines files (metrics.jsonl): one JSON value per line, appended whole. A last line that does not parse
// is a write cut short (a full disk, a kill mid-write): readers skip it and say so; a bad line before the
// last is corruption, an error.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mt {

struct JsonLines {
  std::vector<std::string> lines;  // the text of each whole line, in order (empty lines left out)
  std::vector<nlohmann::json> values;
  int64_t torn_line = 0;  // 1-based number of the torn last line that was skipped; 0 if none
};

// A missing file reads as none; an unreadable file or a malformed line before the last is a data error
// naming the file and the line.
JsonLines read_json_lines(const std::string& path);

}  // namespace mt
