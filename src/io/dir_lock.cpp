#include "io/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace mt {

namespace {

// The pid the holder wrote, or "unknown" while it has not written it yet.
std::string holder_pid(int fd) {
  char text[32] = {};
  const ssize_t n = pread(fd, text, sizeof text - 1, 0);
  return n > 0 ? std::string(text, static_cast<size_t>(n)) : std::string("unknown");
}

// Whether fd is still the file at path: a holder that removed its lock file (removing its directory) leaves
// whoever opened it before holding a lock nobody else sees.
bool still_linked(int fd, const std::string& path) {
  struct stat opened {
  }, current{};
  return fstat(fd, &opened) == 0 && stat(path.c_str(), &current) == 0 && opened.st_dev == current.st_dev &&
         opened.st_ino == current.st_ino;
}

}  // namespace

DirectoryLock::DirectoryLock(const std::string& flag, const std::string& dir) : path_(dir + "/" + kLockFile) {
  while (true) {
    fd_ = open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ < 0)
      fail_data(flag + " " + dir + ": cannot create its lock file " + path_ + ": " + std::strerror(errno));
    if (flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string pid = holder_pid(fd_);
      close(fd_);
      if (err == EWOULDBLOCK)
        fail_data(flag + " " + dir + ": in use by another run (pid " + pid + " holds " + path_ +
                  "); wait for it to end or choose another directory");
      fail_data(flag + " " + dir + ": cannot lock " + path_ + ": " + std::strerror(err));
    }
    if (still_linked(fd_, path_)) break;
    close(fd_);
  }
  const std::string pid = std::to_string(getpid());
  if (ftruncate(fd_, 0) != 0 || pwrite(fd_, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    const int err = errno;
    close(fd_);
    fail_data(flag + " " + dir + ": cannot write its lock file " + path_ + ": " + std::strerror(err));
  }
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0) close(fd_);
}

void DirectoryLock::remove_file() {
  unlink(path_.c_str());
  close(fd_);
  fd_ = -1;
}

}  // namespace mt
