#include "io/output_path.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace mt {

namespace {

namespace fs = std::filesystem;

// Creates and removes a probe file in `dir`; a data error naming what was being checked otherwise.
void probe_writable(const std::string& what, const std::string& dir) {
  const std::string probe = dir + "/.memtrain-probe." + std::to_string(getpid());
  const int fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) fail_data(what + ": cannot write into " + dir + ": " + std::strerror(errno));
  close(fd);
  unlink(probe.c_str());
}

}  // namespace

bool make_output_dir(const std::string& flag, const std::string& dir) {
  const std::string what = flag + " " + dir;
  std::error_code ec;
  const bool existed = fs::exists(dir, ec);
  if (existed && !fs::is_directory(dir, ec)) fail_data(what + ": a file, where a directory is expected");
  if (!existed) {
    fs::create_directories(dir, ec);
    if (ec) fail_data(what + ": cannot create directory: " + ec.message());
  }
  probe_writable(what, dir);
  return !existed;
}

void check_existing_dir(const std::string& flag, const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) fail_data(flag + " " + dir + ": not an existing directory");
  probe_writable(flag + " " + dir, dir);
}

void check_output_file(const std::string& flag, const std::string& path) {
  const std::string what = flag + " " + path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail_data(what + ": a directory, where a file is expected");
  const fs::path parent = fs::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  if (!fs::exists(dir, ec)) fail_data(what + ": its directory " + dir + " does not exist");
  if (!fs::is_directory(dir, ec)) fail_data(what + ": " + dir + " is not a directory");
  probe_writable(what, dir);
}

int64_t available_bytes(const std::string& path) {
  struct statvfs fs_info {};
  if (statvfs(path.c_str(), &fs_info) != 0) return -1;
  return static_cast<int64_t>(fs_info.f_bavail) * static_cast<int64_t>(fs_info.f_frsize);
}

}  // namespace mt
