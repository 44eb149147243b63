// DeepSpeed-style JSON configuration (--deepspeed-config FILE), applied on top of the flags: the ZeRO stage
// and optimizer offload, the batch sizes, bf16/fp16 with fp16's loss-scaling settings, the AdamW optimizer
// and gradient clipping.
#pragma once

#include <functional>
#include <set>
#include <string>

#include "config/train_config.h"

namespace mt {

// Every key of the file is accounted for (docs/deepspeed_config.md lists them):
// - a key that sets what a run flag sets, the flag's `deepspeed` key (config/run_flag_table.h) or one that
//   converts (zero_optimization.reduce_bucket_size and allgather_bucket_size in elements, bf16 and fp16 as
//   booleans or {"enabled": ...}, fp16.initial_scale_power, optimizer.type and optimizer.params.betas), is
//   checked as that flag would be and set; where `given_flags` (by first name) holds the flag with another
//   value, the two conflict;
// - a key that cannot change a run here (logging, monitoring, DeepSpeed's own implementation choices; fp16's
//   settings when fp16 is off, as DeepSpeed does) is a warning on stderr naming it;
// - any other key is unsupported.
// Every failure is a usage error naming the file and the key.
void apply_deepspeed_config(const std::string& path, const std::set<std::string, std::less<>>& given_flags,
                            TrainConfig& config);

}  // namespace mt
