// The MPI communicator, built only when CMake finds MPI (MEMTRAIN_HAVE_MPI).
#pragma once

#include <memory>

#include "dist/communicator.h"

namespace mt {

// Initialises MPI (std::runtime_error if this process already did) and returns a communicator over
// MPI_COMM_WORLD, whose waits end the job after `timeout_seconds` (0: never; make_communicator).
std::unique_ptr<Communicator> make_mpi_communicator(double timeout_seconds);

}  // namespace mt
