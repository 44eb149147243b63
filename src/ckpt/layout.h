// Where a checkpoint's pieces live. A save directory holds one directory per checkpoint, step_00000012,
// written first as .step_00000012.tmp and renamed when complete. Inside:
//   rank{r}.safetensors  rank r's range of its flat parameters (under model parallelism each model part, a
//                        stage's tensor-parallel rank, numbers its own: CheckpointLayout): weights, fp32
//                        master, Adam m and v, each in its own dtype (1-D tensors "weights", "master",
//                        "adam_m", "adam_v"), and 8-bit moments' fp32 scales, one per block begun
//                        ("adam_m_scales", "adam_v_scales")
//   model.safetensors    the whole weights with Hugging Face names (each rank writes its range into place,
//                        each tensor once)
//   state.json           step, optimizer, loss scaler, data cursor, random streams, config, run, metrics
//   manifest.json        every file above with its size and CRC-32C; written last
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mt::ckpt {

inline constexpr const char* kManifestFile = "manifest.json";
inline constexpr const char* kStateFile = "state.json";
inline constexpr const char* kModelFile = "model.safetensors";

std::string checkpoint_name(int64_t step);  // "step_00000012"
// ".step_00000012.tmp" while being written, ".step_00000012.old" while a new copy replaces it,
// ".step_00000012.del" while being removed.
std::string hidden_name(int64_t step, const char* suffix);
std::string rank_file_name(int rank);  // "rank0.safetensors"

// The elements [begin, end) of the flat parameters that rank `rank` of `world` writes: the same split as
// ZeRO's shards (ceil(n / world), rounded up to whole moment blocks of `block` elements), whatever the
// stage, so every element is written exactly once and every block by one rank.
struct FlatRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};
FlatRange save_range(int64_t num_params, int world, int rank, int64_t block);

// A rank's part of the model under tensor and pipeline parallelism (Megatron's layout): its stage's layers,
// split over the stage's tensor-parallel ranks. Each part numbers its own flat parameters; parts are indexed
// stage x tp + tensor-parallel rank.
struct ModelPart {
  int tp = 1, pp = 1;
  int tp_rank = 0, pp_rank = 0;
  int index() const { return pp_rank * tp + tp_rank; }
};

// The checkpoint directories (step_N) of a save directory, newest first; none when it does not exist.
std::vector<std::string> list_checkpoints(const std::string& save_dir);

// True when `dir` is one checkpoint (holds a manifest, or is named step_N) rather than a save directory.
bool is_checkpoint_dir(const std::string& dir);

}  // namespace mt::ckpt
