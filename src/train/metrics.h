// metrics.jsonl: one JSON object per logged step, flushed as it is written so a crash loses nothing logged.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "io/atomic_file.h"  // write_file_atomically, for the run's other files

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

}  // namespace mt
