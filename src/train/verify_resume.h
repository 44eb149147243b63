// --verify-resume K: proof that a resume is exact, for this run's own configuration. Trains K steps, saves a
// checkpoint into OUT/verify-resume, trains on to --train-iters; then a fresh trainer loads the checkpoint
// and trains the same steps. The verdict compares the losses of every step after K (bitwise) and the hash of
// the final model states, optimizer, loss scaler and data cursor; a mismatch is a data error (exit 1).
#pragma once

#include "config/train_config.h"
#include "devices/devices.h"
#include "dist/async_communicator.h"

namespace mt {

void verify_resume(const TrainConfig& config, AsyncCommunicator& comm, const DeviceTarget& device);

}  // namespace mt
