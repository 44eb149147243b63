// `memtrain export CKPT --merge-adapter`: a LoRA checkpoint as a whole Hugging Face model, each adapted
// module's weight W' = W + (lora_alpha / r) * B @ A (PEFT's merge; transposed for GPT-2's Conv1D weights,
// fan_in_fan_out), over the base the checkpoint names.
#pragma once

#include <string>

#include "ckpt/state.h"

namespace mt::ckpt {

// The dtype a checkpoint's weights are exported in: the fp32 master copy when it has one, else the weights'.
DType export_dtype(const CheckpointLayout& layout);

// Creates --out `out_dir` when missing: a data error naming it otherwise.
void create_export_dir(const std::string& out_dir);

// Writes every tensor of the model into out_dir (created once the checkpoint and its base check), one at a
// time: the base's from the recorded --init-from (its files' checksums checked against the checkpoint's) or
// drawn again from the seed, the checkpoint's trained tensors (--lora-train-modules) in their place, each
// adapter merged into its module's weight in fp32, then rounded to export_dtype. model.safetensors, or the
// base's shard files and a model.safetensors.index.json when the base has several; then config.json.
// `base` names the base's files instead of the recorded --init-from (a relative path from another folder,
// a moved base): checked against the recorded checksums all the same.
void export_merged(const std::string& checkpoint_dir, const CheckpointState& state,
                   const std::string& out_dir, const std::string& base);

}  // namespace mt::ckpt
