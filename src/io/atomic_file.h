// Whole-file writes that readers never see half done.
#pragma once

#include <string>

namespace mt {

// Writes text to path through a temporary file and a rename: readers see the old file or the whole new one.
void write_file_atomically(const std::string& path, const std::string& text);

}  // namespace mt
