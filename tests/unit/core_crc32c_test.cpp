#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/crc32c.h"

namespace mt {
namespace {

// The check values of CRC-32C from RFC 3720 (iSCSI), appendix B.4, and the usual "123456789" check.
TEST(Crc32c, MatchesPublishedCheckValues) {
  const std::string digits = "123456789";
  EXPECT_EQ(crc32c(digits.data(), digits.size()), 0xE3069283u);
  const std::vector<unsigned char> zeros(32, 0x00), ones(32, 0xFF);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::vector<unsigned char> ascending(32);
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<unsigned char>(i);
  EXPECT_EQ(crc32c(ascending.data(), ascending.size()), 0x46DD794Eu);
  EXPECT_EQ(crc32c(nullptr, 0), 0u);
}

TEST(Crc32c, ExtendsOverChunks) {
  const std::string text = "checkpoint files are checksummed as they stream";
  const uint32_t whole = crc32c(text.data(), text.size());
  for (size_t split = 0; split <= text.size(); split += 7)
    EXPECT_EQ(crc32c(text.data() + split, text.size() - split, crc32c(text.data(), split)), whole);
  EXPECT_EQ(crc32c_hex(0xE3069283u), "e3069283");
  EXPECT_EQ(crc32c_hex(0x1u), "00000001");
}

}  // namespace
}  // namespace mt
