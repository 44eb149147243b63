#include "io/json_lines.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace mt {

JsonLines read_json_lines(const std::string& path) {
  JsonLines file;
  if (!std::filesystem::exists(path)) return file;
  std::ifstream in(path);
  if (!in) fail_data(path + ": cannot open: " + std::strerror(errno));
  std::string line;
  int64_t bad_line = 0;
  std::string bad_reason;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    if (bad_line > 0) fail_data(path + ":" + std::to_string(bad_line) + ": not a JSON line: " + bad_reason);
    try {
      file.values.push_back(nlohmann::json::parse(line));
      file.lines.push_back(line);
    } catch (const nlohmann::json::exception& e) {
      bad_line = number;  // torn if it turns out to be the last
      bad_reason = e.what();
    }
  }
  file.torn_line = bad_line;
  return file;
}

}  // namespace mt
