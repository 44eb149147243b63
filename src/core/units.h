// Byte sizes as people write them: "80GiB", "24GB", "512 MiB", "1.5TiB", "4096". Binary units are powers of
// 1024 (1 GiB = 2^30 bytes), decimal ones powers of 1000 (1 GB = 1e9 bytes), exactly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace mt {

// The size in bytes, rounded down to a whole byte; nothing for text that is not a non-negative number with
// an optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB; case-sensitive as written here), or too large.
std::optional<int64_t> parse_bytes(const std::string& text);

}  // namespace mt
