// `memtrain inspect CKPT` and `memtrain export CKPT --out DIR`: a checkpoint's contents, verified, and its
// weights as a Hugging Face style model directory.
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <vector>

#include "ckpt/export.h"
#include "ckpt/layout.h"
#include "ckpt/manifest.h"
#include "ckpt/reader.h"
#include "ckpt/state.h"
#include "cli/commands.h"
#include "core/crc32c.h"
#include "core/error.h"

namespace mt::cli {

namespace {

constexpr size_t kReadChunk = 1 << 20;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A checkpoint directory, or the newest one of a save directory that verifies; `command` names the
// argument in the errors.
std::string chosen_checkpoint(const std::string& command, const std::string& dir) {
  std::vector<char> buffer(kReadChunk);
  return ckpt::select_checkpoint(dir, command, false, buffer);
}

void inspect(const std::string& dir) {
  std::vector<char> buffer(kReadChunk);
  const std::string chosen = chosen_checkpoint("inspect", dir);
  const ckpt::Manifest manifest = ckpt::verify_checkpoint(chosen, buffer);
  const ckpt::CheckpointState state = ckpt::read_state(chosen);
  const ckpt::CheckpointLayout& layout = state.layout;
  std::printf("checkpoint %s: step %lld, saved by %d rank%s, checksums verified (CRC-32C)\n", chosen.c_str(),
              static_cast<long long>(state.step), manifest.world, manifest.world == 1 ? "" : "s");
  for (const ckpt::ManifestFile& f : manifest.files)
    std::printf("  %-22s %12llu bytes  crc32c %s  ok\n", f.name.c_str(),
                static_cast<unsigned long long>(f.bytes), crc32c_hex(f.crc32c).c_str());
  std::string counts;  // of each stage's model parts
  for (int64_t n : layout.num_params) counts += (counts.empty() ? "" : " + ") + std::to_string(n);
  if (layout.parts() > 1)
    counts += " (each of " + std::to_string(layout.tp) + " tensor-parallel ranks of " +
              std::to_string(layout.pp()) + (layout.pp() == 1 ? " stage)" : " stages)");
  std::printf("model states: %s flat parameters | weights %s%s | Adam moments %s | optimizer updates %lld\n",
              counts.c_str(), std::string(dtype_name(layout.weights)).c_str(),
              layout.master ? " + F32 master" : "", std::string(dtype_name(layout.moments)).c_str(),
              static_cast<long long>(state.optimizer_updates));
  for (int r = 0; r < layout.world; ++r) {
    const ckpt::FlatRange range = layout.file_range(r);
    const ckpt::ModelPart part = layout.file_part(r);
    std::printf("  %s: flat parameters [%lld, %lld)%s\n", ckpt::rank_file_name(r).c_str(),
                static_cast<long long>(range.begin), static_cast<long long>(range.end),
                layout.parts() == 1 ? ""
                                    : (" of tensor-parallel rank " + std::to_string(part.tp_rank) +
                                       ", stage " + std::to_string(part.pp_rank))
                                          .c_str());
  }
  std::printf("data: %s | seed %llu\n",
              state.consumed_samples ? (std::to_string(*state.consumed_samples) + " samples consumed").c_str()
                                     : "a cursor of an older memtrain (a resume continues at its step)",
              static_cast<unsigned long long>(state.seed));
  if (state.loss_scaler)
    std::printf("loss scaler: scale %g, good steps %lld, hysteresis left %d\n", state.loss_scaler->scale,
                static_cast<long long>(state.loss_scaler->good_steps), state.loss_scaler->hysteresis_left);
  if (state.base_files)
    for (const ckpt::ManifestFile& f : *state.base_files)
      std::printf("LoRA base file %s: %llu bytes, crc32c %s\n", f.name.c_str(),
                  static_cast<unsigned long long>(f.bytes), crc32c_hex(f.crc32c).c_str());
  std::printf("metrics: %s\nmodel: %s\nrun: %s\n", state.metrics.dump().c_str(), state.model.dump().c_str(),
              state.run.dump().c_str());
  std::printf("%zu tensors in %s:\n", layout.tensors.size(), ckpt::kModelFile);
  for (const ckpt::CheckpointTensor& t : layout.tensors)
    std::printf("  %-28s %-5s %s\n", t.name.c_str(), std::string(dtype_name(layout.weights)).c_str(),
                shape_text(t.shape).c_str());
}

}  // namespace

void add_checkpoint_commands(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* inspect_cmd = app.add_subcommand(
      "inspect", "list a checkpoint's files, tensors, dtypes, step and config, and verify its checksums");
  inspect_cmd->add_option("CKPT", *dir, "a checkpoint directory, or a --save directory (its newest)")
      ->required();
  inspect_cmd->callback([dir] { inspect(*dir); });

  auto export_dir = std::make_shared<std::string>();
  auto out = std::make_shared<std::string>();
  CLI::App* export_cmd = app.add_subcommand(
      "export",
      "write a checkpoint's weights as OUT/model.safetensors (Hugging Face names) and OUT/config.json");
  export_cmd->add_option("CKPT", *export_dir, "a checkpoint directory, or a --save directory (its newest)")
      ->required();
  export_cmd->add_option("--out", *out, "the model directory to write")->required();
  auto merge_adapter = std::make_shared<bool>(false);
  CLI::Option* merge = export_cmd->add_flag(
      "--merge-adapter", *merge_adapter,
      "a LoRA checkpoint: write its base (the recorded --init-from, checksums checked, or the "
      "seed's) with every adapter merged, W + (lora_alpha / r) B A");
  auto adapter = std::make_shared<bool>(false);
  export_cmd
      ->add_flag("--adapter", *adapter,
                 "a LoRA checkpoint: write its adapters alone in PEFT's layout (adapter_model.safetensors, "
                 "adapter_config.json), the files --save-adapter writes")
      ->excludes(merge);
  auto base = std::make_shared<std::string>();
  export_cmd->add_option(
      "--init-from", *base,
      "--merge-adapter: the base's weights (a file or folder), when the path the checkpoint "
      "recorded does not reach them from here; checked against its recorded checksums");
  export_cmd->callback([export_dir, out, merge_adapter, adapter, base] {
    const std::string chosen = chosen_checkpoint("export", *export_dir);
    const ckpt::ExportAs as = *adapter         ? ckpt::ExportAs::adapter
                              : *merge_adapter ? ckpt::ExportAs::merged
                                               : ckpt::ExportAs::model;
    ckpt::export_checkpoint(chosen, *out, as, *base);
    std::printf(
        "exported %s to %s: %s\n", chosen.c_str(), out->c_str(),
        as == ckpt::ExportAs::adapter ? "PEFT adapter files" : "Hugging Face weights and config.json");
  });
}

}  // namespace mt::cli
