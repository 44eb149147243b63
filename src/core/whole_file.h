// A file a user hands us, read whole: a failure is a data error naming it.
#pragma once

#include <string>

namespace mt {

// `role` names what the file is for in the error ("--chat-template", "input"); empty: the path alone.
std::string read_whole_file(const std::string& path, const std::string& role = {});

}  // namespace mt
