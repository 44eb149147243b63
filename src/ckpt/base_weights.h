// A LoRA checkpoint's frozen base, named instead of copied: the weight files --init-from resolves to (one
// safetensors file or an index's shards) with their sizes and CRC-32C, computed once per run by streaming
// each file through a small buffer, and checked when a checkpoint is resumed or exported.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "ckpt/manifest.h"
#include "ckpt/state.h"

namespace mt::ckpt {

// The files of the base at `init_from`, each checksummed through `buffer`. A missing file is a data error
// naming it, `where` first.
std::vector<ManifestFile> checksum_base(const std::string& init_from, const std::string& where,
                                        std::span<char> buffer);

// A data error, `where` first, unless `current` (checksum_base of the base now) has the files the checkpoint
// recorded, with their sizes and checksums: it names the file and both checksums. A checkpoint saved before
// bases were checksummed records none: its base, `init_from`, is taken unverified, which stdout says.
void check_recorded_base(const CheckpointState& state, const std::vector<ManifestFile>& current,
                         const std::string& init_from, const std::string& where);

}  // namespace mt::ckpt
