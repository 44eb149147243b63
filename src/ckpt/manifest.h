// manifest.json: the last file of a checkpoint, listing every other file with its size and CRC-32C. A
// checkpoint without one is partial; one whose files differ from it is corrupt (or holds another run's
// manifest).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mt::ckpt {

struct ManifestFile {
  std::string name;  // relative to the checkpoint directory
  uint64_t bytes = 0;
  uint32_t crc32c = 0;
};

struct Manifest {
  int64_t step = 0;
  int world = 1;  // ranks that wrote it: rank0 ... rank{world-1}.safetensors
  std::vector<ManifestFile> files;
};

// The size and CRC-32C of the file at path (its manifest entry `name`), read through `buffer`.
ManifestFile checksum_file(const std::string& path, const std::string& name, std::span<char> buffer);

// Writes text to path, fsynced, and returns its entry for the manifest.
ManifestFile write_synced(const std::string& dir, const std::string& name, const std::string& text);

// Flushes a directory's entries (new files, renames) to disk.
void sync_directory(const std::string& dir);

void write_manifest(const std::string& dir, const Manifest& manifest);

// Reads dir/manifest.json and checks that every file it lists, and every file a checkpoint needs, exists with
// the listed size and checksum, reading the files through `buffer`. Any difference is a data error naming the
// file.
Manifest verify_checkpoint(const std::string& dir, std::span<char> buffer);

}  // namespace mt::ckpt
