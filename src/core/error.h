// Errors that reach the user: one line that names the file or flag and what was expected, and an exit code.
#pragma once

#include <cstdio>
#include <stdexcept>
#include <string>

namespace mt {

// The memtrain binary's exit codes, one per kind of failure.
enum class ErrorKind {
  data = 1,    // data and file errors: shards, weights, checkpoints
  usage = 2,   // flags and configuration
  no_fit = 3,  // the memory plan does not fit the memory limit
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const { return static_cast<int>(kind_); }

 private:
  ErrorKind kind_;
};

// An error one rank of a job has printed for all of them (train/job_agreement.h): the others exit with its
// code and print nothing, so that an error is read once per job.
class ReportedElsewhere : public Error {
 public:
  explicit ReportedElsewhere(ErrorKind kind) : Error(kind, "reported by another rank") {}
};

// The one line an error reaches the user as.
inline void print_error(const std::string& message) {
  std::fprintf(stderr, "memtrain: error: %s\n", message.c_str());
  std::fflush(stderr);
}

[[noreturn]] inline void fail_usage(const std::string& message) {
  throw Error(ErrorKind::usage, message);
}
[[noreturn]] inline void fail_data(const std::string& message) {
  throw Error(ErrorKind::data, message);
}

}  // namespace mt
