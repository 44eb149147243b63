// main() of a test's dump tool, the C++ half of a test whose Python half computes the reference: the tool's
// run(argc, argv), with an exception reported as one line naming the tool and exit code 1.
#pragma once

#include <cstdio>
#include <exception>

namespace mt::test {

inline int run_dump_tool(const char* tool, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return 1;
  }
}

}  // namespace mt::test
