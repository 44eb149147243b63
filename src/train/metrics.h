// metrics.jsonl: one JSON object per logged step, flushed as it is written so a crash loses nothing logged.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace mt {

class MetricsLog {
 public:
  explicit MetricsLog(const std::string& path);  // truncates; data error naming the path if it cannot
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const nlohmann::json& record);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

// Writes text to path through a temporary file and a rename: readers see the old file or the whole new one.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace mt
