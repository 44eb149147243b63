#include "ckpt/writer.h"

#include <filesystem>
#include <regex>
#include <stdexcept>

#include "ckpt/flat_states.h"
#include "ckpt/layout.h"
#include "ckpt/manifest.h"
#include "core/error.h"
#include "core/warning.h"
#include "io/safetensors.h"
#include "model/weights.h"

namespace mt::ckpt {

namespace {

namespace fs = std::filesystem;

// This rank's save range of the weights and the optimizer state, streamed from the device's memory (or from
// the offload file, through its chunk slots): no copy where the host can read that memory.
ManifestFile write_rank_file(const std::string& dir, const Allocation& memory, const CheckpointLayout& layout,
                             int rank) {
  const FlatRange range = layout.file_range(rank);
  const HeldWeights weights = held_weights(memory);
  if (range.begin < weights.range.begin || range.end > weights.range.end)
    throw std::logic_error("checkpoint: rank " + std::to_string(rank) +
                           " does not hold the weights of its range");
  const std::vector<StateTensor> states = state_tensors(memory.plan());
  std::vector<SafetensorsWriter::Item> items = {{kWeightsTensor, weights.dtype, {range.size()}}};
  for (const StateTensor& t : states) items.push_back({t.name, t.dtype, {t.entries(range.begin, range.end)}});
  const float* mini_v = rank == 0 ? memory.optimizer_state().adam_mini_v() : nullptr;
  if (mini_v) items.push_back({kAdamMiniVTensor, DType::f32, {memory.plan().policy.v_blocks}});
  const std::string name = rank_file_name(rank);
  SafetensorsWriter writer(dir + "/" + name, items,
                           {{"range_begin", std::to_string(range.begin)},
                            {"range_end", std::to_string(range.end)},
                            {"num_params", std::to_string(memory.num_params())}});
  const int64_t size = static_cast<int64_t>(dtype_size(weights.dtype));
  const auto write = [&](const char* piece, int64_t, int64_t bytes) {
    writer.write_part(piece, static_cast<uint64_t>(bytes));
  };
  memory.device().read(weights.data + (range.begin - weights.range.begin) * size, range.size() * size, write);
  for (const StateTensor& t : states) {
    const StateAccess access = t.name == "master" ? StateAccess::read_master : StateAccess::read_all;
    memory.optimizer_state().visit(range.begin, range.end, access, [&](const StateWindow& w) {
      memory.device().read(t.in_window(w), t.bytes(w.begin, w.end), write);
    });
  }
  if (mini_v) memory.device().read(mini_v, memory.plan().policy.v_blocks * 4, write);
  writer.finish();
  return {name, writer.bytes_written(), writer.crc32c()};
}

// model.safetensors is written by every rank together: rank 0 lays the file out (header, full size), then
// each rank writes the weights of its save range into their places, straight from its weight buffer (so
// under ZeRO-3, where a rank holds only its shard of the weights, nothing changes; under tensor parallelism
// each rank's part of a split tensor goes to its whole indices; under pipeline parallelism each stage writes
// its own tensors).
SafetensorsLayout model_file_layout(const std::string& path, const CheckpointLayout& layout) {
  std::vector<SafetensorsWriter::Item> items;
  for (const CheckpointTensor& t : layout.tensors) items.push_back({t.name, layout.weights, t.shape});
  return safetensors_layout(path, items, {{"format", "pt"}});
}

void remove_all_or_fail(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) fail_data(path.string() + ": cannot remove: " + ec.message());
}

void rename_or_fail(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::rename(from, to, ec);
  if (ec) fail_data(to.string() + ": cannot rename from " + from.string() + ": " + ec.message());
}

// What a save or a removal cut short leaves: a temporary directory or a checkpoint being removed (both
// removed), or a checkpoint moved aside for its replacement that never arrived (moved back).
void clean_up_unfinished(const std::string& save_dir) {
  static const std::regex unfinished(R"(\.(step_\d+)\.(tmp|old|del))");
  for (const auto& entry : fs::directory_iterator(save_dir)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, match, unfinished)) continue;
    const fs::path original = fs::path(save_dir) / match[1].str();
    if (match[2] == "old" && !fs::exists(original))
      rename_or_fail(entry.path(), original);
    else
      remove_all_or_fail(entry.path());
  }
}

// Renamed out of sight first, so that a kill part way through leaves a hidden directory for the next save to
// remove, never a step_N that has lost some of its files (and so its lineage).
void remove_checkpoint(const fs::path& dir) {
  const fs::path doomed = dir.parent_path() / std::string(".").append(dir.filename().string()).append(".del");
  remove_all_or_fail(doomed);
  rename_or_fail(dir, doomed);
  remove_all_or_fail(doomed);
}

// The first entry of a checkpoint directory that no save writes there (another run's --out or --save placed
// inside it, say); "" when it holds only a checkpoint's files.
std::string foreign_entry(const fs::path& dir) {
  static const std::regex own(R"(rank\d+\.safetensors|model\.safetensors|state\.json|manifest\.json)");
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || !std::regex_match(name, own)) return name;
  }
  return "";
}

// Keeps the newest `keep` checkpoints of run `run_id`; other runs' checkpoints are not this run's to delete,
// nor is a checkpoint that holds anything a save did not write: it stays, with a warning.
void prune_lineage(const std::string& save_dir, const std::string& run_id, size_t keep) {
  size_t kept = 0;
  for (const std::string& dir : list_checkpoints(save_dir)) {
    if (checkpoint_run_id(dir) != run_id) continue;
    if (kept < keep) {
      ++kept;
    } else if (const std::string foreign = foreign_entry(dir); !foreign.empty()) {
      warn("--save " + save_dir + ": kept checkpoint " + dir + " past --keep-checkpoints: it holds " +
           foreign + ", which no checkpoint save wrote");
    } else {
      remove_checkpoint(dir);
    }
  }
}

}  // namespace

void tidy_save_dir(const std::string& save_dir, const std::string& run_id, int keep) {
  clean_up_unfinished(save_dir);
  if (keep > 0) prune_lineage(save_dir, run_id, static_cast<size_t>(keep));
}

size_t remove_checkpoints(const std::string& save_dir) {
  const std::vector<std::string> all = list_checkpoints(save_dir);
  for (const std::string& dir : all) remove_checkpoint(dir);
  return all.size();
}

std::string save_checkpoint(const std::string& save_dir, const CheckpointState& state,
                            const Allocation& memory, const std::vector<FileTensor>& tensors,
                            Communicator& comm, int keep, std::span<char> stream) {
  const int world = comm.size(), rank = comm.rank();
  const fs::path final_dir = fs::path(save_dir) / checkpoint_name(state.step);
  const fs::path tmp_dir = fs::path(save_dir) / hidden_name(state.step, "tmp");
  if (rank == 0) {
    std::error_code ec;
    fs::create_directories(save_dir, ec);
    if (ec) fail_data("--save " + save_dir + ": cannot create directory: " + ec.message());
    clean_up_unfinished(save_dir);
    fs::create_directory(tmp_dir, ec);
    if (ec) fail_data(tmp_dir.string() + ": cannot create: " + ec.message());
  }
  const std::string model_path = (tmp_dir / kModelFile).string();
  const SafetensorsLayout model_file = model_file_layout(model_path, state.layout);
  if (tensors.size() != state.layout.tensors.size())
    throw std::logic_error("checkpoint: the model file's tensors differ from the state's");
  if (rank == 0) create_laid_out_file(model_path, model_file);
  comm.barrier();
  const CheckpointLayout& layout = state.layout;
  const ManifestFile mine = write_rank_file(tmp_dir.string(), memory, layout, rank);
  const FlatRange range = layout.file_range(rank);
  write_tensor_parts(model_path, model_file, tensors, memory, layout.file_part(rank).tp_rank == 0,
                     range.begin, range.end, dtype_size(layout.weights), weight_values(memory));
  // Sizes and checksums to rank 0: both exact in a double (sizes below 2^53). Every rank has written all
  // its parts once this returns.
  const double sent[2] = {static_cast<double>(mine.bytes), static_cast<double>(mine.crc32c)};
  std::vector<double> received(2 * world);
  comm.all_gather(sent, received.data(), 2, DType::f64);
  if (rank == 0) {
    Manifest manifest{state.step, world, {}};
    for (int r = 0; r < world; ++r)
      manifest.files.push_back({rank_file_name(r), static_cast<uint64_t>(received[2 * r]),
                                static_cast<uint32_t>(received[2 * r + 1])});
    manifest.files.push_back(checksum_file(model_path, kModelFile, stream));
    manifest.files.push_back(write_synced(tmp_dir.string(), kStateFile, to_json(state).dump(2) + "\n"));
    write_manifest(tmp_dir.string(), manifest);
    sync_directory(tmp_dir.string());
    // Saving a step that exists again (a resume that repeats it): the old copy stays whole until the new one
    // is in place.
    const fs::path old_dir = fs::path(save_dir) / hidden_name(state.step, "old");
    if (fs::exists(final_dir)) rename_or_fail(final_dir, old_dir);
    rename_or_fail(tmp_dir, final_dir);
    sync_directory(save_dir);
    remove_all_or_fail(old_dir);
    if (keep > 0) prune_lineage(save_dir, state.run_id, static_cast<size_t>(keep));
  }
  comm.barrier();
  return final_dir.string();
}

}  // namespace mt::ckpt
