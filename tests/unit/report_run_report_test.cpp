#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "report/loss_comparison.h"
#include "report/run_report.h"
#include "report/svg.h"

namespace mt {
namespace {

std::string temp_file(const std::string& name, const std::string& text) {
  const std::string dir = ::testing::TempDir() + "memtrain-report-test";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(RunReport, LossCurveReadsStepsAndValidationLosses) {
  const std::string path = temp_file("metrics.jsonl",
                                     "{\"step\": 1, \"loss\": 5.5}\n"
                                     "{\"step\": 2, \"loss\": 5.0, \"val_loss\": 5.2}\n"
                                     "{\"step\": 3, \"loss\": null, \"skipped\": true}\n");
  const LossCurve curve = read_loss_curve(path);
  EXPECT_EQ(curve.train, (std::vector<std::pair<int64_t, double>>{{1, 5.5}, {2, 5.0}}));
  EXPECT_EQ(curve.val, (std::vector<std::pair<int64_t, double>>{{2, 5.2}}));
}

// A last line cut short (a full disk, a kill mid-write) is skipped and counted, not an error.
TEST(RunReport, TornLastLineIsSkipped) {
  const LossCurve curve =
      read_loss_curve(temp_file("torn.jsonl", "{\"step\": 1, \"loss\": 5.5}\n{\"step\": 2, \"lo"));
  EXPECT_EQ(curve.train, (std::vector<std::pair<int64_t, double>>{{1, 5.5}}));
  EXPECT_EQ(curve.torn_line, 2);
}

TEST(RunReport, BadMetricsAreDataErrorsNamingTheFileAndLine) {
  const auto expect_error = [](const std::string& path, const std::string& mention) {
    try {
      read_loss_curve(path);
      ADD_FAILURE() << "read " << path;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::data);
      EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << e.what();
    }
  };
  expect_error(::testing::TempDir() + "no-such-metrics.jsonl", "no-such-metrics.jsonl");
  const std::string corrupt = temp_file(
      "corrupt.jsonl", "{\"step\": 1, \"loss\": 5.5}\n{\"step\": 2, \"lo\n{\"step\": 3, \"loss\": 5}\n");
  expect_error(corrupt, corrupt + ":2:");
  expect_error(temp_file("empty.jsonl", ""), "no logged steps");
}

TEST(RunReport, PictureNamesTheCategoriesAndThePeak) {
  MemoryTimeline t{"tiny <test> | B=1 T=2 | fp32", 1, {}, {}};
  t.planned[Category::params] = 3 << 20;
  t.planned[Category::activations] = 2 << 20;
  for (int op = 0; op < 3; ++op) {
    TimelinePoint p{op, op == 1 ? "op1" : "op", {}};
    p.live[Category::params] = 3 << 20;
    p.live[Category::activations] = (op == 1 ? 2 : 1) << 20;
    t.points.push_back(p);
  }
  const std::string svg = draw_run_report(t, {{{1, 5.5}, {2, 5.0}}, {{2, 5.2}}, 0});
  EXPECT_TRUE(svg.starts_with("<?xml")) << svg.substr(0, 80);
  EXPECT_NE(svg.find("tiny &lt;test&gt;"), std::string::npos);
  EXPECT_NE(svg.find(">parameters<"), std::string::npos);
  EXPECT_NE(svg.find(">activations<"), std::string::npos);
  EXPECT_EQ(svg.find(">gradients<"), std::string::npos) << "a category without bytes is left out";
  EXPECT_NE(svg.find("peak 5.00 MiB during op1"), std::string::npos);
  EXPECT_NE(svg.find(">2 MiB<"), std::string::npos) << "the y axis at round values in the unit that fits";
  EXPECT_NE(svg.find(">4 MiB<"), std::string::npos);
}

TEST(LossComparison, MovingMeanAveragesTheStepsUpToEachPoint) {
  const StepSeries losses = {{1, 6}, {2, 4}, {3, 2}, {5, 0}};
  EXPECT_EQ(moving_mean(losses, 2), (StepSeries{{1, 6}, {2, 5}, {3, 3}, {5, 1}}));
  EXPECT_EQ(moving_mean(losses, 1), losses);
  EXPECT_EQ(moving_mean(losses, 10), (StepSeries{{1, 6}, {2, 5}, {3, 4}, {5, 3}}));
}

TEST(LossComparison, RelativePercentOnlyWhereBothEvaluated) {
  EXPECT_EQ(relative_percent({{10, 5.0}, {20, 4.5}, {30, 2.0}}, {{10, 4.0}, {30, 2.0}}),
            (StepSeries{{10, 25.0}, {30, 0.0}}));
}

TEST(LossComparison, PictureNamesEveryRunWithItsLastLossAgainstTheFirst) {
  const LossCurve fp32{{{1, 6.0}, {2, 5.0}}, {{2, 5.0}}, 0};
  const LossCurve int8{{{1, 6.1}, {2, 5.2}}, {{2, 5.05}}, 0};
  const std::string svg = draw_loss_comparison("moments <fp32 & int8>", {{"fp32", fp32}, {"int8", int8}}, 10);
  EXPECT_TRUE(svg.starts_with("<?xml")) << svg.substr(0, 80);
  EXPECT_NE(svg.find("moments &lt;fp32 &amp; int8&gt;"), std::string::npos);
  EXPECT_NE(svg.find(">fp32<"), std::string::npos);
  EXPECT_NE(svg.find(">int8<"), std::string::npos);
  EXPECT_NE(svg.find(">5.0500<"), std::string::npos) << "the last validation loss";
  EXPECT_NE(svg.find(">+1.00%<"), std::string::npos) << "5.05 against 5.00";
  EXPECT_NE(svg.find("validation loss relative to fp32"), std::string::npos);

  // Runs that never evaluated: only the training panel, the last training losses in the legend.
  const std::string train_only =
      draw_loss_comparison("t", {{"a", {{{1, 6.0}}, {}, 0}}, {"b", {{{1, 6.6}}, {}, 0}}}, 10);
  EXPECT_EQ(train_only.find("validation loss"), std::string::npos);
  EXPECT_NE(train_only.find(">+10.00%<"), std::string::npos);
}

TEST(Svg, EscapesMarkupInText) {
  EXPECT_EQ(svg::escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
}

}  // namespace
}  // namespace mt
