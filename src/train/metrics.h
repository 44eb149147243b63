// metrics.jsonl: one JSON object per logged step. Each line goes out in one write() to a file opened for
// appending, so a crash leaves whole lines; a write that fails is cut back off where it can be, and a torn
// last line that remains is skipped by its readers (io/json_lines.h).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "io/atomic_file.h"  // write_file_atomically, for the run's other files

namespace mt {

class MetricsLog {
 public:
  // A fresh run (`resumed_step` 0) starts the file afresh; an earlier run's records are kept, renamed to
  // metrics.N.jsonl (the first free N), never truncated. Resuming after step `resumed_step` > 0 keeps the
  // records of the steps up to it and appends after them (records of later steps came from a run that was
  // cut off). A data error names the path if it cannot.
  explicit MetricsLog(const std::string& path, int64_t resumed_step = 0);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Appends the record as one line; when it cannot, failure() says why. The run decides what to do: a lost
  // log line must not cost the training it describes.
  void write(const nlohmann::json& record);
  const std::string& failure() const { return failure_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::string failure_;
};

}  // namespace mt
