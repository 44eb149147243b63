#include <gtest/gtest.h>

#include "core/error.h"
#include "core/names.h"

namespace mt {
namespace {

enum class Shade { light, dark, none };

TEST(NameTable, InOrderNamesEachValueByDeclaration) {
  constexpr auto names = names_in_order<Shade>("light", "dark", "none");
  static_assert(names.parse("dark") == Shade::dark);
  EXPECT_EQ(names.name(Shade::light), "light");
  EXPECT_EQ(names.name(Shade::none), "none");
  EXPECT_EQ(names.list(), "light, dark or none");
  EXPECT_FALSE(names.parse("grey").has_value());
}

TEST(NameTable, PartialTableLeavesUnnamedValuesEmpty) {
  constexpr auto names = name_table(std::pair{Shade::dark, "dark"});
  EXPECT_EQ(names.name(Shade::light), "");
  EXPECT_EQ(names.parse("dark"), Shade::dark);
}

TEST(NameTable, ParseOrFailNamesTheFlagAndTheChoices) {
  constexpr auto names = names_in_order<Shade>("light", "dark", "none");
  EXPECT_EQ(names.parse_or_fail("--shade", "none"), Shade::none);
  try {
    names.parse_or_fail("--shade", "grey");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "--shade grey: expected light, dark or none");
    EXPECT_EQ(e.kind(), ErrorKind::usage);
  }
}

}  // namespace
}  // namespace mt
