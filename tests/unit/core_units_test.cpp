#include <gtest/gtest.h>

#include "core/units.h"

namespace mt {
namespace {

TEST(Units, BinaryAndDecimalUnitsAreExact) {
  EXPECT_EQ(parse_bytes("80GiB"), int64_t{80} << 30);
  EXPECT_EQ(parse_bytes("24GB"), int64_t{24'000'000'000});
  EXPECT_EQ(parse_bytes("512 MiB"), int64_t{512} << 20);
  EXPECT_EQ(parse_bytes("1.5TiB"), (int64_t{3} << 40) / 2);
  EXPECT_EQ(parse_bytes("4096"), 4096);
  EXPECT_EQ(parse_bytes("7B"), 7);
  EXPECT_EQ(parse_bytes("2KB"), 2000);
  EXPECT_EQ(parse_bytes("2KiB"), 2048);
  EXPECT_EQ(parse_bytes("0.5GB"), 500'000'000);
}

TEST(Units, RejectsWhatIsNotASize) {
  for (const char* bad : {"", "GiB", "-1GiB", "80gib", "80 GiBs", "1e30TB", "x80GB", "nan", "inf"})
    EXPECT_FALSE(parse_bytes(bad).has_value()) << bad;
}

}  // namespace
}  // namespace mt
