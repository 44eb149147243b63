// `memtrain export`: a checkpoint's weights as a Hugging Face style model directory.
#pragma once

#include <string>

namespace mt::ckpt {

// Writes out_dir/model.safetensors (Hugging Face names; the fp32 master weights when the checkpoint has
// them, else the weights in their stored dtype), assembled tensor by tensor from the rank files, and
// out_dir/config.json. The checkpoint must verify. A LoRA checkpoint needs `merge_adapter` (export_merged)
// and any other refuses it: usage errors.
void export_checkpoint(const std::string& checkpoint_dir, const std::string& out_dir, bool merge_adapter);

}  // namespace mt::ckpt
