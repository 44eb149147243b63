#include "ckpt/export.h"

#include <algorithm>
#include <vector>

#include "ckpt/flat_states.h"
#include "ckpt/layout.h"
#include "ckpt/manifest.h"
#include "ckpt/merged_export.h"
#include "ckpt/state.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/lora.h"

namespace mt::ckpt {

void export_checkpoint(const std::string& checkpoint_dir, const std::string& out_dir, bool merge_adapter) {
  const CheckpointState state = read_state(checkpoint_dir);
  const CheckpointLayout& layout = state.layout;
  const auto adapter =
      std::ranges::find_if(layout.tensors, [](const CheckpointTensor& t) { return is_lora_a(t.name); });
  const bool lora = adapter != layout.tensors.end();
  // Its model.safetensors holds adapters, not a whole model.
  if (lora && !merge_adapter)
    fail_usage(
        "export " + checkpoint_dir + ": a LoRA checkpoint (tensor " + adapter->name +
        ") holds adapters, not a whole model: pass --merge-adapter to write the base with them merged");
  // A flag that would change nothing is a mistaken command, not one to ignore.
  if (!lora && merge_adapter)
    fail_usage("--merge-adapter: " + checkpoint_dir +
               " is not a LoRA checkpoint (no adapters to merge); export it without --merge-adapter");
  if (lora) {
    export_merged(checkpoint_dir, state, out_dir);
    return;
  }
  create_export_dir(out_dir);
  const std::string source = layout.master ? "master" : "weights";
  const DType dtype = export_dtype(layout);
  std::vector<SafetensorsWriter::Item> items;
  int64_t largest = 0;
  for (const CheckpointTensor& t : layout.tensors) {
    items.push_back({t.name, dtype, t.shape});
    largest = std::max(largest, t.numel());
  }
  const RankFiles files(checkpoint_dir, layout);
  // One tensor at a time through one tensor-sized buffer.
  std::vector<char> tensor(static_cast<size_t>(largest) * dtype_size(dtype));
  SafetensorsWriter writer(out_dir + "/" + kModelFile, items, {{"format", "pt"}});
  for (const CheckpointTensor& t : layout.tensors) {
    files.read({source, dtype, nullptr}, {t.offset, t.offset + t.numel()}, tensor.data());
    writer.write_next(tensor.data(), static_cast<uint64_t>(t.numel()) * dtype_size(dtype));
  }
  writer.finish();
  write_synced(out_dir, "config.json", state.model.dump(2) + "\n");
}

}  // namespace mt::ckpt
