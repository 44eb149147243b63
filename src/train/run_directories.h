// A run's claim on where it writes, taken before it writes anything and held to its end: --out and --save
// created and locked against a second run, every output path checked, and a fresh run refused where it would
// overwrite another run's checkpoints. docs/run-directories.md has the rules.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "dist/communicator.h"
#include "io/dir_lock.h"

namespace mt {

class RunDirectories {
 public:
  // Collective. Rank 0, the rank that creates the directories and prunes checkpoints, checks and locks; when
  // it refuses, it fails with its message and the other ranks with the same exit code.
  RunDirectories(const TrainConfig& config, Communicator& comm);
  // A run that fails before writing anything (an exception unwinding) removes the directories it created.
  ~RunDirectories();
  RunDirectories(const RunDirectories&) = delete;
  RunDirectories& operator=(const RunDirectories&) = delete;

 private:
  void claim(const TrainConfig& config);
  void claim_all(const TrainConfig& config);
  void claim_dir(const std::string& flag, const std::string& dir);
  // The directories this run created and left empty but for their lock, newest first.
  void remove_unwritten();

  struct Claimed {
    std::string dir;
    bool created = false;
    std::unique_ptr<DirectoryLock> lock;
  };
  std::vector<Claimed> claimed_;
};

// A warning on stderr when the file system of `dir` has less free space than `needed_bytes`.
void warn_if_short_of_space(const std::string& flag, const std::string& dir, int64_t needed_bytes);

}  // namespace mt
