// Warnings that reach the user: one line on stderr, `memtrain: warning: ...`, from one process of a job.
#pragma once

#include <string>

namespace mt {

// Under mpirun every rank reads the same flags and files before the communicator exists, so the launcher's
// rank decides who speaks: rank 0 (Open MPI's OMPI_COMM_WORLD_RANK, or PMI_RANK), or a process on its own.
void warn(const std::string& message);

}  // namespace mt
