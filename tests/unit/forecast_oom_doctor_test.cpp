// The OOM doctor's suggestions against lay_out_run: each one fits the limit it was asked for, they come
// fastest first, and block recompute is suggested with the fewest layers that fit.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "forecast/oom_doctor.h"

namespace mt {
namespace {

TrainConfig oversize_run() {
  TrainConfig c;
  c.model = "gpt2-tiny";
  c.train_iters = 1;
  c.seq_len = 128;
  c.micro_batch = 8;
  c.threads = 1;
  return c;
}

int64_t total(const TrainConfig& c) {
  return lay_out_run(c, 1, 0, 1, 0).plan.bytes.total();
}

TEST(OomDoctor, EverySuggestionFitsFastestFirst) {
  const TrainConfig run = oversize_run();
  const int64_t limit = total(run) * 3 / 4;
  const std::vector<FitChange> changes = changes_that_fit(run, 1, limit);
  ASSERT_FALSE(changes.empty());
  for (size_t i = 0; i < changes.size(); ++i) {
    EXPECT_LE(changes[i].bytes, limit) << changes[i].flags;
    if (i > 0) {
      EXPECT_LE(changes[i - 1].step_s, changes[i].step_s);
    }
  }
}

TEST(OomDoctor, SuggestsTheFewestBlockLayersThatFit) {
  const TrainConfig run = oversize_run();
  const int64_t limit = total(run) * 3 / 4;
  const std::vector<FitChange> changes = changes_that_fit(run, 1, limit);
  const std::string block =
      "use --recompute-granularity full --recompute-method block --recompute-num-layers ";
  const auto it = std::find_if(changes.begin(), changes.end(),
                               [&](const FitChange& c) { return c.flags.rfind(block, 0) == 0; });
  ASSERT_NE(it, changes.end());
  const int64_t layers = std::stoll(it->flags.substr(block.size()));
  TrainConfig fewer = run;
  fewer.recompute = {
      .granularity = RecomputeGranularity::full, .method = RecomputeMethod::block, .num_layers = layers};
  EXPECT_EQ(total(fewer), it->bytes);
  if (layers > 1) {
    fewer.recompute.num_layers = layers - 1;
    EXPECT_GT(total(fewer), limit);
  }
}

// The changes are planned at the level this process runs its kernels at: bf16 at generic holds the products'
// conversion tiles, which the suggested bytes include.
TEST(OomDoctor, PlansAtThisProcesssLevel) {
  struct AtGeneric {
    kernels::CpuIsa level = kernels::cpu_isa();
    AtGeneric() { kernels::set_cpu_isa(kernels::CpuIsa::generic); }
    ~AtGeneric() { kernels::set_cpu_isa(level); }
  } at_generic;
  TrainConfig run = oversize_run();
  run.precision.precision = Precision::bf16;
  const std::vector<FitChange> changes = changes_that_fit(run, 1, total(run) * 3 / 4);
  const auto halved = std::find_if(changes.begin(), changes.end(), [](const FitChange& c) {
    return c.flags == "use --micro-batch-size 4 --grad-accum-steps 2";
  });
  ASSERT_NE(halved, changes.end());
  run.micro_batch = 4;
  run.grad_accum_steps = 2;
  EXPECT_EQ(halved->bytes, lay_out_run(run, 1, 0, 1, 0, kernels::CpuIsa::generic).plan.bytes.total());
  EXPECT_GT(halved->bytes, lay_out_run(run, 1, 0, 1, 0, kernels::CpuIsa::avx512_bf16).plan.bytes.total());
}

TEST(OomDoctor, RefusesWithExitCodeThree) {
  TrainConfig run = oversize_run();
  run.memory_limit = total(run) - 1;
  try {
    check_memory_fit(lay_out_run(run, 1, 0, 1, 0), run, 1);
    ADD_FAILURE() << "a plan one byte over the limit was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::no_fit);
    EXPECT_NE(std::string(e.what()).find("--memory-limit"), std::string::npos) << e.what();
  }
  run.memory_limit = total(run);
  EXPECT_NO_THROW(check_memory_fit(lay_out_run(run, 1, 0, 1, 0), run, 1));
}

}  // namespace
}  // namespace mt
