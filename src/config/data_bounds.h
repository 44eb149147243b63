// The run's counts against its data, checked before anything runs (train calls it after check_config): a
// count that the data cannot serve, or whose product overflows 64 bits, would otherwise run on without a
// word.
#pragma once

#include "config/train_config.h"

namespace mt {

// Usage errors naming the flags: a step's sequences against the training shards' (each sequence T+1 tokens,
// T apart), an evaluation of more batches than the default against the validation shards' sequences, and the
// tokens of the whole run (--train-iters steps) against 64 bits. `world`: the ranks of the job.
void check_data_bounds(const TrainConfig& cfg, int world);

}  // namespace mt
