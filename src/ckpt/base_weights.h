// A LoRA checkpoint's frozen base, named instead of copied: the weight files --init-from resolves to (one
// safetensors file or an index's shards) with their sizes and CRC-32C, computed once per run by streaming
// each file through a small buffer, and checked when a checkpoint is resumed or exported.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "ckpt/manifest.h"

namespace mt::ckpt {

// The files of the base at `init_from`, each checksummed through `buffer`. A missing file is a data error
// naming it, `where` first.
std::vector<ManifestFile> checksum_base(const std::string& init_from, const std::string& where,
                                        std::span<char> buffer);

// A data error, `where` first, unless `current` (checksum_base of the base now) has the files of `recorded`
// (a checkpoint's) with their sizes and checksums: it names the file and both checksums.
void check_base(const std::vector<ManifestFile>& recorded, const std::vector<ManifestFile>& current,
                const std::string& where);

}  // namespace mt::ckpt
