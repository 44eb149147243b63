// A job across hosts needs one file system for its outputs and data: rank 1 writes checkpoints into the
// --save rank 0 checked, and every rank reads the same shards. Before step 1 the ranks check that they see
// the same files, so a job whose paths exist on one host only is refused at once, naming the host, rather
// than at its first checkpoint or its last step.
#pragma once

#include "config/train_config.h"
#include "dist/communicator.h"

namespace mt {

// Collective, after the run's directories are claimed (train/run_directories.h): rank 0 writes a check file
// with a random value into --out, --save and --save-adapter's directory (or the folder it will be made in);
// every other rank reads them back, and compares the names, sizes and first bytes of the --data shards (and
// their loss masks) with rank 0's. A data error on each rank that sees something else, naming the flag and
// the path; rank 0 removes its check files before any rank returns or throws.
void check_shared_files(const TrainConfig& config, Communicator& comm);

}  // namespace mt
