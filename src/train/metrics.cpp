#include "train/metrics.h"

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace mt {

MetricsLog::MetricsLog(const std::string& path) : path_(path), file_(std::fopen(path.c_str(), "w")) {
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
