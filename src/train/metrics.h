// metrics.jsonl: one JSON object per logged step, flushed as it is written so a crash loses nothing logged.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "io/atomic_file.h"  // write_file_atomically, for the run's other files

namespace mt {

class MetricsLog {
 public:
  // Starts the file afresh, or, resuming after step `resumed_step` > 0, keeps the records of the steps up to
  // it and appends after them (records of later steps came from a run that was cut off). A data error names
  // the path if it cannot.
  explicit MetricsLog(const std::string& path, int64_t resumed_step = 0);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const nlohmann::json& record);

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace mt
