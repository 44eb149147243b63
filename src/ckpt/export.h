// `memtrain export`: a checkpoint's weights as a Hugging Face style model directory.
#pragma once

#include <string>

namespace mt::ckpt {

// What export writes of a checkpoint: its model, a LoRA one's base with the adapters merged
// (--merge-adapter), or a LoRA one's adapters alone in PEFT's layout (--adapter).
enum class ExportAs { model, merged, adapter };

// Writes out_dir/model.safetensors (Hugging Face names; the fp32 master weights when the checkpoint has
// them, else the weights in their stored dtype), assembled tensor by tensor from the rank files, and
// out_dir/config.json. The checkpoint must verify. A LoRA checkpoint needs ExportAs::merged (export_merged)
// or ::adapter (export_adapter), which any other refuses: usage errors.
// `base` is export_merged's (ExportAs::merged only; "" otherwise).
void export_checkpoint(const std::string& checkpoint_dir, const std::string& out_dir, ExportAs as,
                       const std::string& base = "");

}  // namespace mt::ckpt
