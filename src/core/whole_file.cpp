#include "core/whole_file.h"

#include <fstream>
#include <sstream>

#include "core/error.h"

namespace mt {

std::string read_whole_file(const std::string& path, const std::string& role) {
  const std::string named = (role.empty() ? "" : role + " ") + path;
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_data(named + ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail_data(named + ": read failed");
  return text.str();
}

}  // namespace mt
