// DeepSpeed-style JSON configuration (--deepspeed-config FILE), applied on top of the flags: the ZeRO stage
// and optimizer offload, the batch sizes, and bf16/fp16 with fp16's loss-scaling settings.
#pragma once

#include <string>

#include "train/train_config.h"

namespace mt {

// Keys read: zero_optimization.{stage, overlap_comm, reduce_bucket_size, offload_optimizer.{device,
// nvme_path}},
// train_micro_batch_size_per_gpu, gradient_accumulation_steps, train_batch_size, bf16.enabled,
// fp16.{enabled, loss_scale, initial_scale_power, loss_scale_window, hysteresis, min_loss_scale}. Unknown
// keys are ignored (DeepSpeed files carry many); a known key of the wrong type is a data error naming the
// file.
void apply_deepspeed_config(const std::string& path, TrainConfig& config);

}  // namespace mt
