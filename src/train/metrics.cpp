#include "train/metrics.h"

#include <cerrno>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace mt {

MetricsLog::MetricsLog(const std::string& path, int64_t resumed_step) : path_(path) {
  if (resumed_step > 0) {
    std::ifstream in(path);
    std::string line, kept;
    while (std::getline(in, line)) {
      const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
      if (record.is_object() && record.value("step", int64_t{0}) <= resumed_step) kept += line + "\n";
    }
    write_file_atomically(path, kept);
  }
  file_ = std::fopen(path.c_str(), resumed_step > 0 ? "a" : "w");
  if (!file_) fail_data(path + ": cannot create: " + std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (file_) std::fclose(file_);
}

void MetricsLog::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    fail_data(path_ + ": write failed: " + std::strerror(errno));
}

}  // namespace mt
