// The checks of a run's flags across fields (a single numeric flag's range is its bound in the flag table):
// one usage error naming the flag, before anything is allocated or written. Also what the flags resolve to
// that several rooms read: micro-batches per step and data-parallel ranks (with their checks), threads per
// rank.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>

#include "config/train_config.h"
#include "model/spec.h"

namespace mt {

// Micro-batches per optimizer step, from --global-batch-size or --grad-accum-steps (they must agree).
int64_t accumulation_steps(const TrainConfig& c, int64_t data_parallel);

// The data-parallel ranks of a world of `world` ranks under --tensor-model-parallel-size and
// --pipeline-model-parallel-size (a usage error if their product does not divide the world).
int data_parallel_size(const TrainConfig& c, int world);

// What --tensor-model-parallel-size splits must divide evenly (heads, key/value heads, MLP width, padded
// vocabulary), and the features not run under it: usage errors naming the flags.
void check_tensor_parallel_flags(const TrainConfig& c, const ModelSpec& spec, int64_t seq_len);

// --optimizer-in-backward: each block is updated when the backward completes its gradients, so accumulation
// over micro-batches (which would keep every gradient) and what is not scheduled block by block yet (ZeRO-3,
// tensor and pipeline parallelism, optimizer offload) are usage errors naming both flags. Clipping and fp16
// run a first pass for the norm (train/backward_update.h).
void check_optimizer_in_backward(const TrainConfig& c, int64_t accumulation);

// What --pipeline-model-parallel-size must divide (the layers), and what it does not run with (ZeRO-2/3, as
// DeepSpeed; LoRA, optimizer offload): usage errors naming the flags.
void check_pipeline_parallel_flags(const TrainConfig& c, const ModelSpec& spec);

// The checks of the configuration alone, the ones `train` and `estimate` both make before anything else: the
// device (--device: one this build trains on), the parallel features this build runs (the rest are explicit
// errors rather than silent fallbacks), and the checkpoint flags' values and combinations (--save, --load,
// --resume, --exit-interval, --verify-resume).
void check_config(const TrainConfig& c);

// The checks that need the model and the sequence length, which lay_out_run makes for every plan: the tensor-
// and pipeline-parallel splits, the batch, precision and loss scaling, the schedule and AdamW.
void check_flags(const TrainConfig& c, const ModelSpec& spec, int64_t seq_len);

// The --lora-* flags (`given`: the flags on the command line): each other one needs --lora-rank, values in
// their bounds, and no --save-weights yet (weight files do not hold adapters). The module names are
// checked against the model when its graph is built.
void check_lora_flags(const TrainConfig& c, const std::set<std::string, std::less<>>& given);

// OpenMP threads per rank: --threads, else one per rank among `world` > 1 (ranks share the machine's cores),
// else every core.
int rank_threads(const TrainConfig& c, int world);

}  // namespace mt
