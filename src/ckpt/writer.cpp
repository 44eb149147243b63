#include "ckpt/writer.h"

#include <cstdio>
#include <filesystem>
#include <regex>
#include <stdexcept>

#include "ckpt/flat_states.h"
#include "ckpt/layout.h"
#include "ckpt/manifest.h"
#include "core/error.h"
#include "io/safetensors.h"

namespace mt::ckpt {

namespace {

namespace fs = std::filesystem;

// This rank's save range of every model-state buffer, streamed from memory.
ManifestFile write_rank_file(const std::string& dir, const Allocation& memory, int world, int rank) {
  const FlatRange range = save_range(memory.num_params(), world, rank);
  std::vector<SafetensorsWriter::Item> items;
  std::vector<const char*> sources;
  for (const FlatBuffer& b : flat_buffers(memory)) {
    if (range.begin < b.range.begin || range.end > b.range.end)
      throw std::logic_error("checkpoint: rank " + std::to_string(rank) +
                             " does not hold its save range of " + b.name);
    items.push_back({b.name, b.dtype, {range.size()}});
    sources.push_back(b.data + (range.begin - b.range.begin) * static_cast<int64_t>(dtype_size(b.dtype)));
  }
  const std::string name = rank_file_name(rank);
  SafetensorsWriter writer(dir + "/" + name, items,
                           {{"range_begin", std::to_string(range.begin)},
                            {"range_end", std::to_string(range.end)},
                            {"num_params", std::to_string(memory.num_params())}});
  for (size_t i = 0; i < items.size(); ++i)
    writer.write_next(sources[i], static_cast<uint64_t>(range.size()) * dtype_size(items[i].dtype));
  writer.finish();
  return {name, writer.bytes_written(), writer.crc32c()};
}

// The weights with Hugging Face names, in their own dtype, straight from rank 0's weight buffer.
ManifestFile write_model_file(const std::string& dir, const CheckpointLayout& layout,
                              const Allocation& memory) {
  std::vector<SafetensorsWriter::Item> items;
  for (const CheckpointTensor& t : layout.tensors) items.push_back({t.name, layout.weights, t.shape});
  SafetensorsWriter writer(dir + "/" + kModelFile, items, {{"format", "pt"}});
  const int64_t size = static_cast<int64_t>(dtype_size(layout.weights));
  for (const CheckpointTensor& t : layout.tensors)
    writer.write_next(static_cast<const char*>(memory.params()) + t.offset * size,
                      static_cast<uint64_t>(t.numel() * size));
  writer.finish();
  return {kModelFile, writer.bytes_written(), writer.crc32c()};
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

// What a save cut short leaves: a temporary directory (removed), or a checkpoint moved aside for its
// replacement that never arrived (moved back).
void clean_up_unfinished(const std::string& save_dir) {
  static const std::regex unfinished(R"(\.(step_\d+)\.(tmp|old))");
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

}  // namespace

std::string save_checkpoint(const std::string& save_dir, const CheckpointState& state,
                            const Allocation& memory, Communicator& comm, int keep) {
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
  comm.barrier();
  const ManifestFile mine = write_rank_file(tmp_dir.string(), memory, world, rank);
  // Sizes and checksums to rank 0: both exact in a double (sizes below 2^53).
  const double sent[2] = {static_cast<double>(mine.bytes), static_cast<double>(mine.crc32c)};
  std::vector<double> received(2 * world);
  comm.all_gather(sent, received.data(), 2, DType::f64);
  if (rank == 0) {
    Manifest manifest{state.step, world, {}};
    for (int r = 0; r < world; ++r)
      manifest.files.push_back({rank_file_name(r), static_cast<uint64_t>(received[2 * r]),
                                static_cast<uint32_t>(received[2 * r + 1])});
    manifest.files.push_back(write_model_file(tmp_dir.string(), state.layout, memory));
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
    if (keep > 0) {
      const std::vector<std::string> all = list_checkpoints(save_dir);
      for (size_t i = static_cast<size_t>(keep); i < all.size(); ++i) remove_all_or_fail(all[i]);
    }
  }
  comm.barrier();
  return final_dir.string();
}

}  // namespace mt::ckpt
