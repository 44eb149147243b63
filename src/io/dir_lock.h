// An advisory lock on a directory, so that two runs never write into the same one: flock on
// DIR/.memtrain.lock, which holds the holder's pid for the refusal message. The kernel drops the lock when
// its process ends, even by SIGKILL, so a crashed run never leaves a directory locked.
#pragma once

#include <string>

namespace mt {

inline constexpr const char* kLockFile = ".memtrain.lock";

class DirectoryLock {
 public:
  // Locks the existing directory `dir`; when another process holds it, a data error naming `flag`, the
  // directory and the holder's pid.
  DirectoryLock(const std::string& flag, const std::string& dir);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

  // Unlinks the lock file, then releases: for a directory about to be removed.
  void remove_file();

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace mt
