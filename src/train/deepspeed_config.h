// DeepSpeed-style JSON configuration (--deepspeed-config FILE), applied on top of the flags: the ZeRO stage
// and optimizer offload, the batch sizes, and bf16/fp16 with fp16's loss-scaling settings.
#pragma once

#include <string>

#include "train/train_config.h"

namespace mt {

// Keys read: each run flag's `deepspeed` key (train/run_flag_table.h), and those that convert:
// zero_optimization.reduce_bucket_size (elements), bf16.enabled, fp16.{enabled, initial_scale_power}. Unknown
// keys are ignored (DeepSpeed files carry many); a known key of the wrong type is a data error naming the
// file.
void apply_deepspeed_config(const std::string& path, TrainConfig& config);

}  // namespace mt
