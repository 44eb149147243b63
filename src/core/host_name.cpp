#include "core/host_name.h"

#include <unistd.h>

#include <array>

namespace mt {

std::string host_name() {
  std::array<char, 256> name{};
  if (gethostname(name.data(), name.size() - 1) != 0 || name[0] == '\0') return "an unnamed host";
  return name.data();
}

}  // namespace mt
