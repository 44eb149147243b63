#include "core/warning.h"

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace mt {

namespace {

bool launcher_rank_zero() {
  for (const char* variable : {"OMPI_COMM_WORLD_RANK", "PMI_RANK"})
    if (const char* rank = std::getenv(variable)) return std::string_view(rank) == "0";
  return true;
}

}  // namespace

bool command_line_reported_by_rank_zero() {
  const char* command_lines = std::getenv("OMPI_NUM_APP_CTX");
  return command_lines != nullptr && std::string_view(command_lines) == "1" && !launcher_rank_zero();
}

void warn(const std::string& message) {
  if (launcher_rank_zero()) std::fprintf(stderr, "memtrain: warning: %s\n", message.c_str());
}

}  // namespace mt
