#include "ckpt/base_weights.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/crc32c.h"
#include "core/error.h"
#include "model/weights.h"

namespace mt::ckpt {

std::vector<ManifestFile> checksum_base(const std::string& init_from, const std::string& where,
                                        std::span<char> buffer) {
  std::vector<ManifestFile> files;
  for (const std::string& path : weight_files(init_from)) {
    if (!std::filesystem::exists(path))
      fail_data(where + "base file " + path +
                " is missing (a LoRA checkpoint holds the adapters, not the base)");
    files.push_back(checksum_file(path, path, buffer));
  }
  return files;
}

namespace {

// Files are matched by content (size and CRC-32C), so that another path to the same file is the same base;
// names only say what differs.
void check_base(const std::vector<ManifestFile>& recorded, const std::vector<ManifestFile>& current,
                const std::string& where) {
  const auto same = [](const ManifestFile& a, const ManifestFile& b) {
    return a.bytes == b.bytes && a.crc32c == b.crc32c;
  };
  for (const ManifestFile& was : recorded) {
    if (std::ranges::any_of(current, [&](const ManifestFile& now) { return same(now, was); })) continue;
    auto now = std::ranges::find(current, was.name, &ManifestFile::name);
    if (now == current.end() && current.size() == 1 && recorded.size() == 1) now = current.begin();
    if (now == current.end())
      fail_data(where + "base file " + was.name + " is missing: the checkpoint was trained on it (CRC-32C " +
                crc32c_hex(was.crc32c) + ", " + std::to_string(was.bytes) + " bytes)");
    fail_data(where + "base file " + now->name + " has CRC-32C " + crc32c_hex(now->crc32c) + " (" +
              std::to_string(now->bytes) + " bytes), the checkpoint was trained on CRC-32C " +
              crc32c_hex(was.crc32c) + " (" + std::to_string(was.bytes) + " bytes, " + was.name +
              "): the base changed after training");
  }
  for (const ManifestFile& now : current)
    if (std::ranges::none_of(recorded, [&](const ManifestFile& was) { return same(now, was); }))
      fail_data(where + "base file " + now.name + " is not one the checkpoint was trained on (its base: " +
                std::to_string(recorded.size()) + " files)");
}

}  // namespace

void check_recorded_base(const CheckpointState& state, const std::vector<ManifestFile>& current,
                         const std::string& init_from, const std::string& where) {
  if (state.base_files) {
    check_base(*state.base_files, current, where);
    return;
  }
  std::printf(
      "%sit names no checksum of its base (saved before checkpoints recorded one): --init-from %s is taken "
      "as the base it was trained on, unverified\n",
      where.c_str(), init_from.c_str());
}

}  // namespace mt::ckpt
