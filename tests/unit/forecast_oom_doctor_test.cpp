// The OOM doctor's suggestions against lay_out_run: each one fits the limit it was asked for, they come
// fastest first, and block recompute is suggested with the fewest layers that fit.
#include <gtest/gtest.h>

#include <algorithm>

#include "backend/cpu/cpu_isa.h"
#include "core/error.h"
#include "devices/devices.h"
#include "forecast/config_search.h"
#include "forecast/oom_doctor.h"
#include "forecast/shipped_profiles.h"
#include "parallel/parallel_groups.h"

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
  return lay_out_run(c, ParallelRank{.dp = 1}, {.cpu_isa = process_cpu_isa(), .threads = 1}, 0)
      .plan.bytes.total();
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

// The update in the backward and Adam-mini are ways to fit, each with the bytes lay_out_run plans for it; the
// update in the backward never where it does not run (accumulation over micro-batches).
TEST(OomDoctor, OffersTheUpdateInTheBackwardAndAdamMini) {
  const TrainConfig run = oversize_run();
  const int64_t limit = total(run) - 1;  // anything that saves a byte fits
  const std::vector<FitChange> changes = changes_that_fit(run, 1, limit);
  const auto offered = [&](const std::string& flags) {
    return std::find_if(changes.begin(), changes.end(), [&](const FitChange& c) { return c.flags == flags; });
  };
  const auto in_backward = offered("add --optimizer-in-backward");
  ASSERT_NE(in_backward, changes.end());
  TrainConfig changed = run;
  changed.optimizer_in_backward = true;
  EXPECT_EQ(in_backward->bytes, total(changed));
  const auto mini = offered("use --optimizer adam-mini");
  ASSERT_NE(mini, changes.end());
  changed = run;
  changed.optimizer = OptimizerKind::adam_mini;
  EXPECT_EQ(mini->bytes, total(changed));
  TrainConfig accumulating = run;
  accumulating.grad_accum_steps = 2;
  for (const FitChange& c : changes_that_fit(accumulating, 1, total(accumulating) - 1))
    EXPECT_EQ(c.flags.find("--optimizer-in-backward"), std::string::npos) << c.flags;
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
    CpuIsa level = process_cpu_isa();
    AtGeneric() { kernels::set_cpu_isa(CpuIsa::generic); }
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
  EXPECT_EQ(halved->bytes,
            lay_out_run(run, ParallelRank{.dp = 1}, {.cpu_isa = CpuIsa::generic, .threads = 1}, 0)
                .plan.bytes.total());
  EXPECT_GT(halved->bytes,
            lay_out_run(run, ParallelRank{.dp = 1}, {.cpu_isa = CpuIsa::avx512_bf16, .threads = 1}, 0)
                .plan.bytes.total());
}

const FitChange* find_change(const std::vector<FitChange>& changes, const std::string& flags) {
  const auto it =
      std::find_if(changes.begin(), changes.end(), [&](const FitChange& c) { return c.flags == flags; });
  return it == changes.end() ? nullptr : &*it;
}

// A run whose activations are already as small as they get (micro-batch 1, every layer recomputed): at fp16,
// where no bf16 saving applies, 8-bit moments are the precision change that fits, at lay_out_run's bytes and
// at the cost of a slower step (their AdamW's measured rate); int8's scales take less than fp8's.
TEST(OomDoctor, OffersEightBitMomentsAtAnyPrecision) {
  TrainConfig run = oversize_run();
  run.micro_batch = 1;
  run.recompute = full_recompute(RecomputeMethod::uniform, 1);
  run.precision.precision = Precision::fp16;
  TrainConfig int8 = run;
  int8.precision.set_moments(MomentDType::int8);
  const std::vector<FitChange> changes = changes_that_fit(run, 1, total(int8));
  const FitChange* found = find_change(changes, "use --exp-avg-dtype int8 --exp-avg-sq-dtype int8");
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->bytes, total(int8));
  EXPECT_EQ(find_change(changes, "use --exp-avg-dtype fp8 --exp-avg-sq-dtype fp8"), nullptr);
  const HardwareProfile& profile = shipped_hardware_profile(process_cpu_isa(), 1);
  EXPECT_GT(found->step_s, evaluate_candidate(run, 1, profile, process_cpu_isa()).cost.step_s);
  for (const FitChange& c : changes) EXPECT_EQ(c.flags.find("--bf16"), std::string::npos) << c.flags;
}

// From fp32, 8-bit moments come alone or as the step after O2's savings: bf16 with bf16 gradients and 8-bit
// moments instead of bf16 ones (10 bytes per parameter against O2's 12).
TEST(OomDoctor, EightBitMomentsAfterTheO2Steps) {
  TrainConfig run = oversize_run();
  run.micro_batch = 1;
  run.recompute = full_recompute(RecomputeMethod::uniform, 1);
  TrainConfig o2 = run, after_o2 = run;
  o2.precision = {.precision = Precision::bf16,
                  .exp_avg = MomentDType::bf16,
                  .exp_avg_sq = MomentDType::bf16,
                  .o2_gradient = true};
  after_o2.precision = o2.precision;
  after_o2.precision.set_moments(MomentDType::int8);
  ASSERT_LT(total(after_o2), total(o2));
  const std::vector<FitChange> changes = changes_that_fit(run, 1, total(o2) - 1);
  const FitChange* step =
      find_change(changes, "add --bf16 --exp-avg-dtype int8 --exp-avg-sq-dtype int8 --main-grads-dtype bf16");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->bytes, total(after_o2));
  EXPECT_EQ(
      find_change(changes, "add --bf16 --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 --main-grads-dtype bf16"),
      nullptr);
}

TEST(OomDoctor, RefusesWithExitCodeThree) {
  TrainConfig run = oversize_run();
  run.memory_limit = total(run) - 1;
  try {
    check_memory_fit(run, 1);
    ADD_FAILURE() << "a plan one byte over the limit was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::no_fit);
    EXPECT_NE(std::string(e.what()).find("--memory-limit"), std::string::npos) << e.what();
  }
  run.memory_limit = total(run);
  EXPECT_NO_THROW(check_memory_fit(run, 1));
}

int64_t stage_total(const TrainConfig& c, int stage) {
  return lay_out_run(c, ParallelRank{.dp = 1, .pp_rank = stage}, {.cpu_isa = process_cpu_isa(), .threads = 1},
                     parallel_buffer_bytes(parallel_rank(c, c.pipeline_parallel, stage)))
      .plan.bytes.total();
}

// Under pipeline parallelism the stages differ: the check holds the largest to the limit, whichever stage it
// is, and refuses one byte less.
TEST(OomDoctor, ChecksTheLargestStage) {
  TrainConfig run = oversize_run();
  run.pipeline_parallel = 2;
  run.global_batch = run.micro_batch;  // one micro-batch: the first stage holds no more than the last
  const int64_t first = stage_total(run, 0), last = stage_total(run, 1);
  ASSERT_LT(first, last);
  run.memory_limit = last - 1;
  EXPECT_THROW(check_memory_fit(run, 2), Error);
  run.memory_limit = last;
  EXPECT_NO_THROW(check_memory_fit(run, 2));
}

// More pipeline stages of the same world are offered, at their largest stage's bytes; not beside ZeRO-2.
TEST(OomDoctor, OffersMorePipelineStages) {
  TrainConfig run = oversize_run();
  run.micro_batch = 2;
  run.global_batch = 8;
  TrainConfig staged = run;
  staged.pipeline_parallel = 2;
  const int64_t largest = std::max(stage_total(staged, 0), stage_total(staged, 1));
  const std::vector<FitChange> changes = changes_that_fit(run, 2, largest);
  const FitChange* found = find_change(changes, "use --pipeline-model-parallel-size 2");
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->bytes, largest);
  run.zero_stage = 2;
  for (const FitChange& c : changes_that_fit(run, 2, largest))
    EXPECT_EQ(c.flags.find("--pipeline-model-parallel-size"), std::string::npos) << c.flags;
}

}  // namespace
}  // namespace mt
