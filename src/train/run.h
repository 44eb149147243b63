// The top of `memtrain train`: flag checks, signals, the communicator, the OOM check, then the step loop
// (or --verify-resume). Start reading the training code here.
#pragma once

#include <functional>

#include "config/train_config.h"
#include "devices/devices.h"
#include "dist/async_communicator.h"

namespace mt {

// Judges the plans of a run of `world` ranks before anything is allocated; throws mt::Error(no_fit) to refuse
// it. Given by the caller (the OOM doctor of src/forecast/ for `memtrain train`, which plans every pipeline
// stage's largest rank).
using MemoryFitCheck = std::function<void(const TrainConfig& config, int world)>;

// Whether --data's training shards carry loss masks and pack records (instruction data, data/shard.h): the
// graph then holds the mask and the positions, so train and estimate both ask.
void read_data_shape(TrainConfig& config);

// Runs the whole training; throws mt::Error for bad input (with nothing half-written).
void train(const TrainConfig& config, const MemoryFitCheck& check_fit = {});

// The step loop with its checkpoint hooks, on `device`: resume before it, a save after a step when due, and a
// stop (signal or --exit-interval) that saves and ends the run normally.
void run_training(const TrainConfig& config, AsyncCommunicator& comm, const DeviceTarget& device);

}  // namespace mt
