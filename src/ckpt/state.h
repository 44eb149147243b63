// state.json: everything of a run that is not a tensor. Restored as is: the step, Adam's update count, the
// loss scaler, the data cursor. Compared on resume: the run's settings that shape the trajectory (keyed by
// their flags) and the model config. Described: the layout of the rank files and the random streams.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/layout.h"
#include "ckpt/manifest.h"
#include "core/dtype.h"
#include "optim/loss_scaler.h"

namespace mt::ckpt {

// One parameter tensor as model.safetensors names and shapes it; its elements are the flat parameters
// [offset, offset + numel) of one process (an embedding's padding rows follow them in the flat buffer and are
// not exported; under model parallelism the parts' flat numberings differ from it).
struct CheckpointTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
  int64_t numel() const;
};

// How the flat model states were stored. Rank file r is world rank r's (ParallelGroups' layout: r = (stage x
// dp + data-parallel rank) x tp + tensor-parallel rank): the flat parameters of its model part, each part
// numbering its own (ModelPart), the save range of them of its data-parallel rank.
struct CheckpointLayout {
  std::vector<int64_t> num_params = {0};  // of each model part, by stage (one entry per stage)
  int world = 1;                          // rank files
  int tp = 1;                             // tensor-parallel ranks
  int64_t padded_vocab = 0;               // the embedding's rows, padding included (0: not recorded)
  DType weights = DType::f32;
  bool master = false;  // fp32 master weights present
  DType moments = DType::f32;
  int64_t moment_block = 0;  // blocked moments: elements per scale; 0: none
  std::vector<CheckpointTensor> tensors;

  int pp() const { return static_cast<int>(num_params.size()); }  // pipeline stages
  int parts() const { return tp * pp(); }
  int dp() const { return world / parts(); }
  ModelPart file_part(int file) const { return {tp, pp(), file % tp, file / (tp * dp())}; }
  FlatRange file_range(int file) const {
    return save_range(num_params[static_cast<size_t>(file_part(file).pp_rank)], dp(), file / tp % dp(),
                      moment_block);
  }
};

struct CheckpointState {
  int64_t step = 0;                              // optimizer steps taken, skipped ones included
  int64_t optimizer_updates = 0;                 // Adam's t: skipped steps do not count
  std::optional<LossScaler::State> loss_scaler;  // fp16 only
  // Samples of the global order (data/loader.h) the run has read, after `step`. Absent in checkpoints saved
  // before samples were numbered globally: their cursor counted windows of one micro-batch, an order that
  // no longer exists, and a resume continues at `step` global batches of the new order.
  std::optional<int64_t> consumed_samples;
  // The training data: Loader::data_crc32c. Absent in checkpoints saved before it was recorded.
  std::optional<uint32_t> data_crc32c;
  uint64_t seed = 0;                                // every random stream derives from it (see to_json)
  nlohmann::json run = nlohmann::json::object();    // flag -> value that a resume must repeat
  nlohmann::json model = nlohmann::json::object();  // Hugging Face style config.json
  std::string model_name;  // --model as given (a preset or a config's path); "" in older checkpoints
  nlohmann::json metrics = nlohmann::json::object();  // the step's loss, lr, grad norm, ...
  CheckpointLayout layout;
  // A LoRA run's frozen base from --init-from, which the checkpoint names instead of holding: its weight
  // files (paths as --init-from resolves them), sizes and CRC-32C. Absent for a base drawn from the seed, and
  // in checkpoints saved before bases were checksummed.
  std::optional<std::vector<ManifestFile>> base_files;
  // The run's lineage: drawn by a fresh run, carried over by each resume. Pruning removes only checkpoints
  // of its own lineage; "" in checkpoints written before lineages existed.
  std::string run_id;
};

nlohmann::json to_json(const CheckpointState& state);
// Data errors name `path` for missing or malformed fields.
CheckpointState state_from_json(const nlohmann::json& j, const std::string& path);
CheckpointState read_state(const std::string& checkpoint_dir);
// A new lineage: 16 random hex digits.
std::string new_run_id();
// The run id of a checkpoint's state.json, or "" when it has none or cannot be read.
std::string checkpoint_run_id(const std::string& checkpoint_dir);

}  // namespace mt::ckpt
