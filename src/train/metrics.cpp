#include "train/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "io/json_lines.h"

namespace mt {

namespace {

namespace fs = std::filesystem;

// metrics.jsonl -> metrics.1.jsonl, or the first free number after it.
void keep_earlier_run(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec) || fs::file_size(path, ec) == 0) return;
  const fs::path p(path);
  fs::path kept;
  for (int n = 1; kept.empty() || fs::exists(kept, ec); ++n)
    kept = p.parent_path() / (p.stem().string() + "." + std::to_string(n) + p.extension().string());
  fs::rename(p, kept, ec);
  if (ec)
    fail_data(path + ": cannot keep the earlier run's records as " + kept.string() + ": " + ec.message());
  std::printf("a fresh run: the earlier run's %s is kept as %s\n", p.filename().c_str(), kept.c_str());
}

// The records of the steps up to `resumed_step`, rewritten whole.
void keep_steps_up_to(const std::string& path, int64_t resumed_step) {
  const JsonLines file = read_json_lines(path);
  if (file.torn_line > 0)
    std::printf("%s: skipped its torn last line %lld (a write cut short)\n", path.c_str(),
                static_cast<long long>(file.torn_line));
  std::string kept;
  for (size_t i = 0; i < file.values.size(); ++i)
    if (file.values[i].is_object() && file.values[i].value("step", int64_t{0}) <= resumed_step)
      kept += file.lines[i] + "\n";
  write_file_atomically(path, kept);
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path, int64_t resumed_step) : path_(path) {
  if (resumed_step > 0)
    keep_steps_up_to(path, resumed_step);
  else
    keep_earlier_run(path);
  fd_ =
      open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | (resumed_step > 0 ? 0 : O_TRUNC), 0644);
  if (fd_ < 0) fail_data(path + ": cannot create: " + std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) close(fd_);
}

void MetricsLog::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  const off_t before = lseek(fd_, 0, SEEK_END);
  size_t done = 0;
  while (done < line.size()) {  // one write, unless the file system takes only part of it
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failure_ = path_ + ": write failed: " + (n < 0 ? std::strerror(errno) : "nothing written");
      if (before >= 0 && ftruncate(fd_, before) != 0) failure_ += " (a torn last line remains)";
      return;
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace mt
