// CRC-32C (Castagnoli), the checksum of checkpoint files: table-driven, one byte at a time, extendable over
// a stream of chunks (crc32c(b, n2, crc32c(a, n1)) == crc32c(a ++ b, n1 + n2)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mt {

uint32_t crc32c(const void* data, std::size_t bytes, uint32_t crc = 0);

// Eight lower-case hex digits, as manifests spell a checksum.
std::string crc32c_hex(uint32_t crc);

}  // namespace mt
