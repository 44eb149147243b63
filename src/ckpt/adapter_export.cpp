#include "ckpt/adapter_export.h"

#include <algorithm>
#include <vector>

#include "ckpt/flat_states.h"
#include "ckpt/layout.h"
#include "ckpt/merged_export.h"
#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/hf_config.h"
#include "model/model.h"
#include "model/peft_adapter.h"

namespace mt::ckpt {

namespace {

template <typename T>
T run_setting(const CheckpointState& state, const char* flag, const std::string& where) {
  try {
    return state.run.at(flag).get<T>();
  } catch (const nlohmann::json::exception&) {
    fail_data(where + "its run settings hold no valid " + flag);
  }
}

}  // namespace

std::string recorded_init_from(const CheckpointState& state, const std::string& where) {
  return run_setting<std::string>(state, "--init-from", where);
}

LoraConfig recorded_lora(const CheckpointState& state, const std::string& where) {
  LoraConfig lora;
  lora.rank = run_setting<int64_t>(state, "--lora-rank", where);
  lora.alpha = run_setting<float>(state, "--lora-alpha", where);
  lora.dropout = run_setting<float>(state, "--lora-dropout", where);
  lora.target = run_setting<std::string>(state, "--lora-target", where);
  lora.train_modules = run_setting<std::string>(state, "--lora-train-modules", where);
  // Checkpoints from before --lora-rslora existed scaled by alpha / r.
  lora.rslora = state.run.contains("--lora-rslora") && run_setting<bool>(state, "--lora-rslora", where);
  if (lora.rank <= 0) fail_data(where + "its adapters have no --lora-rank in its run settings");
  return lora;
}

void export_adapter(const std::string& checkpoint_dir, const CheckpointState& state,
                    const std::string& out_dir) {
  const std::string where = "export " + checkpoint_dir + ": ";
  const LoraConfig lora = recorded_lora(state, where);
  // PEFT's modules_to_save is not written (as --save-adapter refuses --lora-train-modules).
  if (!lora.train_modules.empty())
    fail_usage("--adapter: " + checkpoint_dir + " also trained --lora-train-modules " + lora.train_modules +
               ", which PEFT's adapter files do not hold yet; export it with --merge-adapter");
  ModelSpec spec = model_config(state.model, checkpoint_dir + "/" + kStateFile);
  spec.padded_vocab_size = spec.vocab_size;
  const ModelGraph model = build_model_graph(spec, {.lora = lora, .seed = state.seed});
  const std::vector<FileTensor> adapters = peft_adapter_tensors(spec, model);
  const DType dtype = export_dtype(state.layout);
  std::vector<SafetensorsWriter::Item> items;
  for (const FileTensor& f : adapters) items.push_back({f.name, dtype, f.shape});
  std::vector<const CheckpointTensor*> saved;  // each adapter's tensor in the checkpoint, checked first
  for (const FileTensor& f : adapters) {
    const std::string& name = model.graph.table[f.param].name;
    const auto t = std::ranges::find(state.layout.tensors, name, &CheckpointTensor::name);
    if (t == state.layout.tensors.end() || t->shape != f.shape)
      fail_data(where + "it holds no adapter " + name + " of the shape its settings give");
    saved.push_back(&*t);
  }
  create_export_dir(out_dir);
  RankFiles files(checkpoint_dir, state.layout);
  std::vector<char> raw;
  SafetensorsWriter writer(out_dir + "/" + kPeftAdapterFile, items, {{"format", "pt"}});
  for (const CheckpointTensor* t : saved) {
    raw.resize(static_cast<size_t>(t->numel()) * dtype_size(dtype));
    files.read({state.layout.master ? "master" : kWeightsTensor, dtype, nullptr},
               {t->offset, t->offset + t->numel()}, raw.data());
    writer.write_next(raw.data(), raw.size());
  }
  writer.finish();
  const std::string base = peft_base_name(recorded_init_from(state, where), state.model_name);
  write_file_atomically(out_dir + "/" + kPeftConfigFile,
                        peft_adapter_config(spec, model, lora, base).dump(2) + "\n");
}

}  // namespace mt::ckpt
