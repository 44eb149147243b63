// Shared by the optimizer state's tests: a small parameter table and a temporary directory.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

#include "memory/tensor_table.h"

namespace mt::testing {

// Three bf16 parameter tensors of 7, 13 and 5 elements: 25, so chunks and blocks of 4 end unevenly.
inline TensorTable three_params() {
  TensorTable t;
  t.add({"a", {7}, DType::bf16, Category::params});
  t.add({"b", {13}, DType::bf16, Category::params});
  t.add({"c", {5}, DType::bf16, Category::params});
  return t;
}

// A fresh directory under the system's temporary one, removed with everything in it at the end.
struct TempDir {
  explicit TempDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / ("memtrain-" + name + "-" + std::to_string(getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path path;
};

}  // namespace mt::testing
