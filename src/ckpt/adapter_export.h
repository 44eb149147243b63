// `memtrain export CKPT --adapter --out DIR`: a LoRA checkpoint's adapters in Hugging Face PEFT's layout,
// the files --save-adapter writes at the end of a run, so that a run without --save-adapter (or one that
// stopped early) still yields them.
#pragma once

#include <string>

#include "ckpt/state.h"
#include "model/lora.h"

namespace mt::ckpt {

// The --init-from a LoRA checkpoint's run recorded ("": its base was drawn from the seed); a data error,
// `where` first, when missing.
std::string recorded_init_from(const CheckpointState& state, const std::string& where);

// The LoRA settings a checkpoint's run recorded; a data error, `where` first, when they are missing.
LoraConfig recorded_lora(const CheckpointState& state, const std::string& where);

// Writes out_dir/adapter_model.safetensors and out_dir/adapter_config.json (out_dir created when missing)
// from the checkpoint's trained adapters: byte for byte what --save-adapter writes for the same step.
void export_adapter(const std::string& checkpoint_dir, const CheckpointState& state,
                    const std::string& out_dir);

}  // namespace mt::ckpt
