// Helpers shared by the data tests: a temporary directory that cleans up after itself, small file writers,
// and a check that a call fails with a data error naming a file.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace mt::test {

class TempDir {
 public:
  TempDir() {
    std::string pattern = ::testing::TempDir() + "memtrain_data_XXXXXX";
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Runs f, expecting an mt::Error of kind data whose message contains needle (usually the file's path).
template <class F>
void expect_data_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected a data error mentioning " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::data) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace mt::test
