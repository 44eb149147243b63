// Warnings that reach the user: one line on stderr, `memtrain: warning: ...`, from one process of a job.
#pragma once

#include <string>

namespace mt {

// Under mpirun every rank reads the same flags and files before the communicator exists, so the launcher's
// rank decides who speaks: rank 0 (Open MPI's OMPI_COMM_WORLD_RANK, or PMI_RANK), or a process on its own.
void warn(const std::string& message);

// Whether rank 0 of this job runs the same command line and so reports its errors: Open MPI's ranks above 0
// when the job was launched with one command line (OMPI_NUM_APP_CTX 1, not `mpirun A : B`).
bool command_line_reported_by_rank_zero();

}  // namespace mt
