// The flag table against the parser it declares: printed arguments parse back to the same configuration,
// --help shows the table's defaults, and a mode's unknown name is a usage error naming its flag.
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "cli/run_flags.h"
#include "config/run_flag_table.h"
#include "core/error.h"
#include "layout/run_layout.h"

namespace mt {
namespace {

// `args` (split at spaces) parsed by a command declared from the table, resolved.
TrainConfig parse(const std::string& args) {
  CLI::App app;
  std::shared_ptr<cli::RunFlags> flags = cli::add_run_flags(app);
  std::vector<std::string> words;
  std::istringstream in(args);
  for (std::string w; in >> w;) words.push_back(w);
  std::reverse(words.begin(), words.end());
  app.parse(words);
  return flags->resolve();
}

std::string all_args(const TrainConfig& c) {
  std::string s;
  for (const RunFlag& flag : run_flag_table())
    if (const std::string a = flag_args(c, flag.name()); !a.empty()) s += " " + a;
  return s;
}

TrainConfig changed_config() {
  TrainConfig c;
  c.model = "llama-tiny";
  c.data = "shards";
  c.seq_len = 32;
  c.micro_batch = 2;
  c.global_batch = 16;
  c.train_iters = 7;
  c.lr = 3.3e-4f;
  c.decay_style = DecayStyle::linear;
  c.optimizer = OptimizerKind::adam_mini;
  c.adam.beta2 = 0.95f;
  c.precision = {.precision = Precision::bf16,
                 .exp_avg = MomentDType::bf16,
                 .exp_avg_sq = MomentDType::bf16,
                 .master_weights = false};
  c.recompute = {
      .granularity = RecomputeGranularity::full, .method = RecomputeMethod::block, .num_layers = 2};
  c.dist_backend = DistBackend::single;
  c.zero_stage = 2;
  c.overlap_comm = false;
  c.bucket_size_mb = 0.1;
  c.offload_optimizer = OffloadOptimizer::nvme;
  c.offload_path = "/tmp/x";
  c.shuffle = false;
  c.eval_interval = 0;
  c.save = "ck";
  c.resume = ResumeMode::automatic;
  c.threads = 3;
  c.tf32 = true;
  c.distributed_timeout_minutes = 0.05;
  return c;
}

TEST(RunFlagTable, PrintedArgumentsParseBackToTheSameConfig) {
  const TrainConfig c = changed_config();
  const TrainConfig back = parse(all_args(c).substr(1));
  EXPECT_EQ(all_args(back), all_args(c));
  EXPECT_EQ(run_settings(back, 32, 16), run_settings(c, 32, 16));
  EXPECT_EQ(back.lr, c.lr);
  EXPECT_EQ(back.bucket_size_mb, c.bucket_size_mb);
  EXPECT_EQ(back.recompute.num_layers, 2);
  EXPECT_EQ(back.offload_path, "/tmp/x");
  EXPECT_FALSE(back.overlap_comm);
  EXPECT_EQ(back.resume, ResumeMode::automatic);
  EXPECT_EQ(back.distributed_timeout_minutes, 0.05);
}

// What the ranks of a job compare before step 1: every flag but the per-rank ones (a host's cores, its
// device).
TEST(RunFlagTable, JobWideArgsAreEveryFlagButThePerRankOnes) {
  const TrainConfig c = changed_config();
  const auto args = job_wide_args(c);
  EXPECT_EQ(args.size(), run_flag_table().size() - 2);
  auto args_of = [](const TrainConfig& config, std::string_view name) {
    for (const auto& [flag, printed] : job_wide_args(config))
      if (flag == name) return printed;
    return std::string("absent");
  };
  EXPECT_EQ(args_of(c, "--threads"), "absent");
  EXPECT_EQ(args_of(c, "--device"), "absent");
  EXPECT_EQ(args_of(c, "--train-iters"), "--train-iters 7");
  EXPECT_EQ(args_of(c, "--distributed-timeout-minutes").rfind("--distributed-timeout-minutes 0.05", 0), 0u);
  EXPECT_EQ(args_of(TrainConfig{}, "--lr"), "");  // the default prints nothing, the same on every rank
  TrainConfig other_cores = c;
  other_cores.threads = 5;
  EXPECT_EQ(job_wide_args(other_cores), args);
  for (auto change : {+[](TrainConfig& x) { x.lr = 1e-3f; }, +[](TrainConfig& x) { x.tensor_parallel = 2; },
                      +[](TrainConfig& x) { x.seed = 7; }, +[](TrainConfig& x) { x.data = "other"; }}) {
    TrainConfig changed = c;
    change(changed);
    EXPECT_NE(job_wide_args(changed), args);
  }
}

TEST(RunFlagTable, DistributedTimeoutTakesFractionsAndRefusesNegatives) {
  const std::string run = "--model gpt2-tiny --data d --train-iters 1 ";
  EXPECT_EQ(parse(run + "--distributed-timeout-minutes 0.25").distributed_timeout_minutes, 0.25);
  EXPECT_EQ(parse(run + "--distributed-timeout-minutes 0").distributed_timeout_minutes, 0);
  EXPECT_EQ(TrainConfig{}.distributed_timeout_minutes, 10);
  for (const std::string bad : {"-1", "nan"}) {
    try {
      check_flag_bounds(parse(run + "--distributed-timeout-minutes " + bad),
                        {"--distributed-timeout-minutes"});
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--distributed-timeout-minutes"), std::string::npos) << e.what();
    }
  }
}

TEST(RunFlagTable, DefaultsPrintNothing) {
  EXPECT_EQ(all_args(TrainConfig{}), "");
  EXPECT_EQ(flag_with_value(TrainConfig{}, "--micro-batch-size"), "--micro-batch-size 4");
}

TEST(RunFlagTable, HelpShowsTheDefaultsOfTrainConfig) {
  CLI::App app;
  cli::add_run_flags(app);
  const std::string help = app.help();
  const TrainConfig d;
  for (const RunFlag& flag : run_flag_table()) {
    if (!flag.show_default) continue;
    const std::string shown = app.get_option(std::string(flag.name()))->get_default_str();
    EXPECT_FALSE(shown.empty()) << flag.name();
    EXPECT_NE(help.find(std::string(flag.name())), std::string::npos) << flag.name();
  }
  EXPECT_EQ(app.get_option("--eval-interval")->get_default_str(), std::to_string(d.eval_interval));
  EXPECT_EQ(app.get_option("--lr-decay-style")->get_default_str(), "cosine");
  EXPECT_EQ(app.get_option("--dist-backend")->get_default_str(), "auto");
  EXPECT_EQ(app.get_option("--offload-optimizer")->get_default_str(), "none");
  EXPECT_EQ(app.get_option("--optimizer")->get_default_str(), "adamw");
}

TEST(RunFlagTable, UnknownModeNamesAreUsageErrorsNamingTheFlag) {
  for (const std::string flag :
       {"--lr-decay-style", "--dist-backend", "--offload-optimizer", "--resume", "--optimizer"}) {
    try {
      parse("--model x " + flag + " bogus");
      ADD_FAILURE() << flag;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::usage);
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  }
}

TEST(RunFlagTable, RunSettingsAreTheTrajectoryFlags) {
  const nlohmann::json settings = run_settings(TrainConfig{}, 64, 8);
  size_t trajectory = 0;
  for (const RunFlag& flag : run_flag_table()) trajectory += flag.trajectory;
  EXPECT_EQ(settings.size(), trajectory);
  EXPECT_EQ(settings.at("--seq-length"), 64);
  EXPECT_EQ(settings.at("--global-batch-size"), 8);
  EXPECT_EQ(settings.at("--precision"), "fp32");
  EXPECT_EQ(settings.at("--no-shuffle"), false);
  EXPECT_EQ(settings.at("--lr-decay-style"), "cosine");
  EXPECT_EQ(settings.at("--optimizer"), "adamw");
}

// A flag without the memory bit leaves every byte of the plan as it was, whatever its value.
TEST(RunFlagTable, FlagsWithoutTheMemoryBitLeaveThePlanAlone) {
  TrainConfig base;
  base.model = "llama-tiny";
  base.seq_len = 64;
  base.train_iters = 10;
  const auto bytes = [](const TrainConfig& c) {
    return lay_out_run(c, ParallelRank{.dp = 1}, {.cpu_isa = process_cpu_isa(), .threads = 1}, 0).plan.bytes;
  };
  const CategoryBytes planned = bytes(base);
  int changed = 0;
  for (const RunFlag& flag : run_flag_table()) {
    if (flag.memory) continue;
    RunFlagInput input;
    input.config = base;
    std::visit(
        [](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, std::string>)
            *p = "x";
          else if constexpr (std::is_same_v<T, bool>)
            *p = !*p;
          else if constexpr (std::is_floating_point_v<T>)
            *p = *p * T(0.5);
          else if constexpr (std::is_enum_v<T>)
            *p = T{1};
          else
            *p = *p + 1;
        },
        flag.field(input));
    if (input.config.global_batch > 0) input.config.global_batch = 8;
    try {
      EXPECT_EQ(bytes(input.config).bytes, planned.bytes) << flag.name();
      ++changed;
    } catch (const Error&) {
      // a value this configuration does not allow (--o2-stochastic-rounding without bf16)
    }
  }
  EXPECT_GT(changed, 20);
}

// Each bound in the table holds at the defaults (--train-iters, which has none, at 1) and, just outside it,
// is the usage error it says.
TEST(RunFlagTable, BoundsRefuseValuesOutsideThemWithTheirMessage) {
  TrainConfig defaults;
  defaults.train_iters = 1;
  int bounded = 0;
  for (const RunFlag& flag : run_flag_table()) {
    if (flag.bound.text.empty()) continue;
    ++bounded;
    const std::string name(flag.name());
    EXPECT_NO_THROW(check_flag_bounds(defaults, {flag.name()})) << name;
    const FlagBound& b = flag.bound;
    for (const double outside : {b.open ? b.low : b.low - 1, b.high + 1}) {
      if (outside > 1e299) continue;  // no upper bound
      RunFlagInput input;
      input.config = defaults;
      std::visit(
          [&](auto* p) {
            using T = std::remove_pointer_t<decltype(p)>;
            if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) *p = static_cast<T>(outside);
          },
          flag.field(input));
      try {
        check_flag_bounds(input.config, {flag.name()});
        ADD_FAILURE() << name << " = " << outside << " was accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::usage);
        EXPECT_EQ(std::string(e.what()), name + " " + std::string(b.text));
      }
    }
  }
  EXPECT_GE(bounded, 20);
}

// No bound lets a NaN through, nor an infinity unless it says so: --lr nan would fail only after step 1.
TEST(RunFlagTable, BoundsRefuseNaNAndInfinity) {
  TrainConfig defaults;
  defaults.train_iters = 1;
  for (const RunFlag& flag : run_flag_table()) {
    RunFlagInput input;
    input.config = defaults;
    const FlagField field = flag.field(input);
    float* const* f = std::get_if<float*>(&field);
    double* const* d = std::get_if<double*>(&field);
    if (flag.bound.text.empty() || (!f && !d)) continue;
    for (const double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
      if (f) **f = static_cast<float>(bad);
      if (d) **d = bad;
      try {
        check_flag_bounds(input.config, {flag.name()});
        ADD_FAILURE() << flag.name() << " = " << bad << " passed";
      } catch (const Error& e) {  // named as what it is, not as out of the bound ("must be positive")
        EXPECT_NE(std::string(e.what()).find("expected a finite number"), std::string::npos) << e.what();
      }
    }
  }
  for (const char* flag : {"--lr", "--min-lr", "--weight-decay", "--clip-grad", "--loss-scale"})
    EXPECT_FALSE(run_flag(flag).bound.text.empty()) << flag;
}

// A 0 that would silently mean the default is an error saying what leaving the flag out does; a 0 that
// means something is taken.
TEST(RunFlagTable, AnExplicitZeroIsNeverASilentDefault) {
  for (const char* flag : {"--seq-length", "--global-batch-size", "--grad-accum-steps", "--verify-resume"}) {
    try {
      parse(std::string("--model x ") + flag + " 0");
      ADD_FAILURE() << flag << " 0 was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::usage);
      EXPECT_EQ(std::string(e.what()).find(std::string(flag) + " must be"), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find("(leave it out for "), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parse("--model x").seq_len, 0);  // absent: the model's positions, as before
  EXPECT_EQ(parse("--model x --exit-interval 0").exit_interval, 0);  // 0: never, as its help says
  EXPECT_NE(std::string(run_flag("--exit-interval").help).find("0: never"), std::string::npos);
}
}  // namespace
}  // namespace mt
