#include "ckpt/export.h"

#include <filesystem>
#include <vector>

#include "ckpt/flat_states.h"
#include "ckpt/layout.h"
#include "ckpt/manifest.h"
#include "ckpt/state.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/lora.h"

namespace mt::ckpt {

void export_checkpoint(const std::string& checkpoint_dir, const std::string& out_dir) {
  const CheckpointState state = read_state(checkpoint_dir);
  const CheckpointLayout& layout = state.layout;
  for (const CheckpointTensor& t : layout.tensors)
    if (is_lora_a(t.name))  // its model.safetensors holds adapters, not a whole model
      fail_usage("export " + checkpoint_dir + ": a LoRA checkpoint (tensor " + t.name +
                 "); merging adapters into the base is not implemented yet");
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) fail_data("--out " + out_dir + ": cannot create directory: " + ec.message());
  const std::string source = layout.master ? "master" : "weights";
  const DType dtype = layout.master ? DType::f32 : layout.weights;
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
