// This process's host, for messages that must say where a rank runs.
#pragma once

#include <string>

namespace mt {

// gethostname(2), or "an unnamed host".
std::string host_name();

}  // namespace mt
