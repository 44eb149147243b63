#include <gtest/gtest.h>

#include <sstream>

#include "memory/plan.h"
#include "memory/report.h"
#include "tests/device_test_util.h"

namespace mt {
namespace {

// Built with a stream: GCC 12's -Wrestrict misfires on "literal" + std::to_string(...) at -O3.
template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

TEST(MemoryReport, LargestTensorsAreTheTopTenWithTheirLifetimes) {
  TensorTable t;
  std::vector<std::string> op_names;
  for (int op = 0; op < 13; ++op) op_names.push_back(cat("op", op));
  for (int i = 0; i < 12; ++i)  // t0 smallest .. t11 largest; t_i lives over ops [i, i + 1]
    t.add({cat("t", i), {16 * (i + 1)}, DType::f32, Category::activations, i, i + 1});
  t.add({"w", {1000}, DType::f32, Category::params});
  const ArenaLayout layout = pack_arena(t, Category::activations, testing::kAlignment);
  std::istringstream text(format_largest_tensors(t, layout, Category::activations, 10, op_names));
  std::string title, header, line;
  std::getline(text, title);
  std::getline(text, header);
  EXPECT_NE(title.find("10 of 12"), std::string::npos) << title;
  std::vector<std::string> rows;
  while (std::getline(text, line)) rows.push_back(line);
  ASSERT_EQ(rows.size(), 10u);
  for (int r = 0; r < 10; ++r) {
    const int i = 11 - r;  // largest first
    std::istringstream row(rows[r]);
    std::string name, shape, dtype;
    row >> name >> shape >> dtype;
    EXPECT_EQ(name, cat("t", i));
    EXPECT_EQ(shape, cat("[", 16 * (i + 1), "]"));
    EXPECT_NE(rows[r].find(cat(" ", layout.offset[i], " ")), std::string::npos) << rows[r];
    EXPECT_NE(rows[r].find(cat("[", i, ", ", i + 1, "]")), std::string::npos) << rows[r];
    EXPECT_NE(rows[r].find(cat(op_names[i], " .. ", op_names[i + 1])), std::string::npos) << rows[r];
  }
}

}  // namespace
}  // namespace mt
