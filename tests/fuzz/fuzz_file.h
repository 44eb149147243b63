// What every fuzz target shares: the input as a file (the parsers read files a user hands us), and the rule
// that a parser may only refuse its input with mt::Error (a one-line error naming the file); any other
// exception escapes to libFuzzer, which reports it with the input, as it does a crash.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/error.h"

namespace mt::fuzz {

// `data` written to a file of this process (a fixed name per target and process), its path returned.
inline std::string as_file(const uint8_t* data, size_t size, const std::string& name) {
  const std::string path = "/tmp/memtrain-fuzz-" + std::to_string(getpid()) + "-" + name;
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) __builtin_trap();
  if (size > 0 && std::fwrite(data, 1, size, file) != size) __builtin_trap();
  std::fclose(file);
  return path;
}

// Runs `parse`; mt::Error is the parser refusing the input, which is what it should do with bad input.
template <typename Parse>
void refuse_or_accept(Parse parse) {
  try {
    parse();
  } catch (const Error&) {
  }
}

}  // namespace mt::fuzz
