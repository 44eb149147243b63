// The checks of `memtrain train`'s flags that need the model or the world size: one usage error naming the
// flag, before anything is allocated or written.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include "model/spec.h"
#include "train/train_config.h"

namespace mt {

// Micro-batches per optimizer step, from --global-batch-size or --grad-accum-steps (they must agree).
int64_t accumulation_steps(const TrainConfig& c, int64_t data_parallel);

// The data-parallel ranks of a world of `world` ranks under --tensor-model-parallel-size and
// --pipeline-model-parallel-size (a usage error if their product does not divide the world).
int data_parallel_size(const TrainConfig& c, int world);

// What --tensor-model-parallel-size splits must divide evenly (heads, key/value heads, MLP width, padded
// vocabulary), and the features not run under it: usage errors naming the flags.
void check_tensor_parallel_flags(const TrainConfig& c, const ModelSpec& spec, int64_t seq_len);

// What --pipeline-model-parallel-size must divide (the layers), and what it does not run with (ZeRO-2/3, as
// DeepSpeed; LoRA, optimizer offload): usage errors naming the flags.
void check_pipeline_parallel_flags(const TrainConfig& c, const ModelSpec& spec);

// The parallel features this build runs; the rest are explicit errors rather than silent fallbacks.
void check_parallel_flags(const TrainConfig& c);

// --save, --load, --resume, --exit-interval and --verify-resume: values and combinations.
void check_checkpoint_flags(const TrainConfig& c);

void check_flags(const TrainConfig& c, const ModelSpec& spec, int64_t seq_len);

// The --lora-* flags (`given`: the flags on the command line): each other one needs --lora-rank, values in
// their bounds, and no --save-weights yet (weight files do not hold adapters). The module names are
// checked against the model when its graph is built.
void check_lora_flags(const TrainConfig& c, const std::set<std::string, std::less<>>& given);

// OpenMP threads per rank: --threads, else one per rank among `world` > 1 (ranks share the machine's cores),
// else every core.
int rank_threads(const TrainConfig& c, int world);

}  // namespace mt
