#include "ckpt/export.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "ckpt/adapter_export.h"
#include "ckpt/flat_states.h"
#include "ckpt/layout.h"
#include "ckpt/manifest.h"
#include "ckpt/merged_export.h"
#include "ckpt/saved_params.h"
#include "ckpt/state.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "model/hf_config.h"
#include "model/lora.h"

namespace mt::ckpt {

namespace {

// A checkpoint saved under model parallelism: where its parts held each element. Its model is state.json's,
// with the vocabulary padding the layout records.
std::optional<SavedParams> saved_params(const std::string& checkpoint_dir, const CheckpointState& state) {
  const CheckpointLayout& layout = state.layout;
  if (layout.parts() == 1) return std::nullopt;
  const std::string path = checkpoint_dir + "/" + kStateFile;
  ModelSpec spec = model_config(state.model, path);
  if (layout.padded_vocab < spec.vocab_size)
    fail_data(path + ": layout.padded_vocab " + std::to_string(layout.padded_vocab) +
              " is below the vocabulary of " + std::to_string(spec.vocab_size));
  spec.padded_vocab_size = layout.padded_vocab;
  return SavedParams(spec, layout, "export " + checkpoint_dir + ": ");
}

}  // namespace

void export_checkpoint(const std::string& checkpoint_dir, const std::string& out_dir, ExportAs as,
                       const std::string& base) {
  if (!base.empty() && as != ExportAs::merged)
    fail_usage("--init-from names the base of --merge-adapter: give both, or neither");
  const CheckpointState state = read_state(checkpoint_dir);
  const CheckpointLayout& layout = state.layout;
  const auto adapter =
      std::ranges::find_if(layout.tensors, [](const CheckpointTensor& t) { return is_lora_a(t.name); });
  const bool lora = adapter != layout.tensors.end();
  // Its model.safetensors holds adapters, not a whole model.
  if (lora && as == ExportAs::model)
    fail_usage("export " + checkpoint_dir + ": a LoRA checkpoint (tensor " + adapter->name +
               ") holds adapters, not a whole model: pass --merge-adapter to write the base with them "
               "merged, or --adapter to write the adapters in PEFT's layout");
  // A flag that would change nothing is a mistaken command, not one to ignore.
  const char* flag = as == ExportAs::merged ? "--merge-adapter" : "--adapter";
  if (!lora && as != ExportAs::model)
    fail_usage(std::string(flag) + ": " + checkpoint_dir +
               " is not a LoRA checkpoint (it has no adapters); export it without " + flag);
  if (as == ExportAs::merged) return export_merged(checkpoint_dir, state, out_dir, base);
  if (as == ExportAs::adapter) return export_adapter(checkpoint_dir, state, out_dir);
  create_export_dir(out_dir);
  const std::string source = layout.master ? "master" : "weights";
  const DType dtype = export_dtype(layout);
  std::vector<SafetensorsWriter::Item> items;
  int64_t largest = 0;
  for (const CheckpointTensor& t : layout.tensors) {
    items.push_back({t.name, dtype, t.shape});
    largest = std::max(largest, t.numel());
  }
  const std::optional<SavedParams> saved = saved_params(checkpoint_dir, state);
  std::vector<RankFiles> files;
  for (int part = 0; part < layout.parts(); ++part) files.emplace_back(checkpoint_dir, layout, part);
  const StateTensor values{source, dtype, nullptr};
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  // One tensor at a time through one tensor-sized buffer.
  std::vector<char> tensor(static_cast<size_t>(largest * size));
  SafetensorsWriter writer(out_dir + "/" + kModelFile, items, {{"format", "pt"}});
  for (const CheckpointTensor& t : layout.tensors) {
    const int64_t end = t.offset + t.numel();
    // Without model parallelism a tensor's elements are one range of the one flat numbering.
    for (int64_t g = t.offset; g < end;) {
      const SavedRun from = saved ? saved->locate_flat(g, end - g) : SavedRun{0, g, end - g};
      files[static_cast<size_t>(from.part)].read(values, {from.flat, from.flat + from.count},
                                                 tensor.data() + (g - t.offset) * size);
      g += from.count;
    }
    writer.write_next(tensor.data(), static_cast<uint64_t>(t.numel() * size));
  }
  writer.finish();
  write_synced(out_dir, "config.json", state.model.dump(2) + "\n");
}

}  // namespace mt::ckpt
