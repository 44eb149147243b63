// Checks of a run's output paths before it writes anything: a file where a directory is needed (or the
// reverse), a missing parent or a read-only place is refused at the start, not at the first save or the end.
// Writability is tested the only reliable way, by creating and removing a probe file (permission bits do not
// show a read-only mount, and root ignores them).
#pragma once

#include <cstdint>
#include <string>

namespace mt {

// Makes `dir` a writable directory, creating it and its missing parents when absent; returns whether it
// created it. Data errors name `flag` and the path.
bool make_output_dir(const std::string& flag, const std::string& dir);

// The same for a directory that must exist already.
void check_existing_dir(const std::string& flag, const std::string& dir);

// A file the run will write (through a temporary file beside it): not a directory, and its parent an existing
// writable directory.
void check_output_file(const std::string& flag, const std::string& path);

// Bytes an unprivileged writer may still use on the file system holding `path`; -1 when unknown.
int64_t available_bytes(const std::string& path);

}  // namespace mt
