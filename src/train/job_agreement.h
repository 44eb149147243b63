// Before step 1 the ranks of a job agree: on the errors of their flags and data, so that each is printed
// once per job and no rank goes on alone into a collective the failed ones never reach; and on their
// settings, so that no job trains ranks that were told different things (`mpirun ... : ...`).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "config/train_config.h"
#include "dist/communicator.h"

namespace mt {

// Collective: runs `check` on every rank. When it throws an mt::Error on any rank, the error is printed once
// (by rank 0 when every rank failed alike, else by each rank that failed, naming the rank and its host)
// and every rank then throws ReportedElsewhere with that rank's code (the first failing rank's where it did
// not fail). One rank: `check` itself.
void agree_on_failure(Communicator& comm, const std::function<void()>& check);

// Collective: a usage error, the same on every rank, naming each flag that must match across the job
// (job_wide_args, and a --model file's contents) but differs, and the ranks whose value differs from rank
// 0's.
void check_same_settings(const TrainConfig& config, Communicator& comm);

// Collective: every rank's `words` (the same count on each), rank after rank.
std::vector<int32_t> gather_words(Communicator& comm, const std::vector<int32_t>& words);

}  // namespace mt
