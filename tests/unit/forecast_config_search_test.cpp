// The planner's search against lay_out_run, the trainer's own plan: every listed configuration fits on every
// rank, the list is sorted by the cost model, and the ranking follows the usual advice where it holds.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <set>
#include <utility>

#include "backend/cpu/cpu_isa.h"
#include "core/error.h"
#include "devices/devices.h"
#include "dist/communicator.h"
#include "forecast/config_search.h"
#include "parallel/parallel_groups.h"
#include "plan_test_util.h"

namespace mt {
namespace {

TrainConfig tiny_base(const std::string& model, int64_t global_batch) {
  TrainConfig c;
  c.model = model;
  c.data = "DATA";
  c.train_iters = 10;
  c.seq_len = 64;
  c.global_batch = global_batch;
  c.threads = 1;
  return c;
}

// World rank `rank`'s plan, tensor- and pipeline-parallel candidates included.
RunLayout rank_layout(const TrainConfig& c, int world, int rank) {
  const ParallelRank place = parallel_rank(c, world, rank);
  return lay_out_run(c, place, {.cpu_isa = process_cpu_isa(), .threads = c.threads},
                     parallel_buffer_bytes(place));
}

int64_t rank_total(const TrainConfig& c, int world, int rank) {
  return rank_layout(c, world, rank).plan.bytes.total();
}

int64_t largest_rank_total(const TrainConfig& c, int world) {
  int64_t largest = 0;
  for (int r = 0; r < world; ++r) largest = std::max(largest, rank_total(c, world, r));
  return largest;
}

TrainConfig with_precision(TrainConfig c, PrecisionConfig p) {
  c.precision = p;
  return c;
}

// The smallest run with 16-bit moments: bf16 with O2's moments and gradients, micro-batch 1, every layer
// recomputed.
TrainConfig smallest_o2(const TrainConfig& base) {
  TrainConfig small = with_precision(base, {.precision = Precision::bf16,
                                            .exp_avg = MomentDType::bf16,
                                            .exp_avg_sq = MomentDType::bf16,
                                            .o2_gradient = true});
  small.micro_batch = 1;
  small.recompute = {.granularity = RecomputeGranularity::full, .method = RecomputeMethod::uniform};
  return small;
}

// A limit between the smallest and the largest configurations, so that the search has to drop some.
int64_t middle_limit(const TrainConfig& base, int world) {
  TrainConfig big = with_precision(base, {.precision = Precision::fp32});
  big.micro_batch = base.global_batch / world;
  TrainConfig small = smallest_o2(base);
  if (world > 1) small.zero_stage = 3;
  return (rank_total(big, world, 0) + rank_total(small, world, 0)) / 2;
}

TEST(Planner, ListsOnlyFittingConfigurationsSortedByPredictedTime) {
  for (const std::string model : {"gpt2-tiny", "llama-tiny"})
    for (int world : {1, 2}) {
      const TrainConfig base = tiny_base(model, 8);
      const SearchRequest request{.base = base,
                                  .ranks = world,
                                  .device_memory = middle_limit(base, world),
                                  .profile = testing::tested_profile()};
      const SearchResult result = search_configs(request);
      ASSERT_FALSE(result.fitting.empty()) << model << " x" << world;
      EXPECT_GT(result.candidates_planned, static_cast<int64_t>(result.fitting.size()));
      for (size_t i = 0; i < result.fitting.size(); ++i) {
        const ConfigCandidate& c = result.fitting[i];
        if (i > 0) {
          EXPECT_LE(result.fitting[i - 1].cost.step_s, c.cost.step_s);
        }
        // Every rank of the run fits, not only rank 0, and the listed bytes are the largest's lay_out_run;
        // the cost is the one planned without the search's graph cache.
        EXPECT_EQ(c.rank_bytes, largest_rank_total(c.config, world));
        EXPECT_EQ(c.cost.step_s,
                  evaluate_candidate(c.config, world, request.profile, request.isa).cost.step_s);
        EXPECT_LE(c.rank_bytes, request.device_memory);
        const int dp = world / (c.config.tensor_parallel * c.config.pipeline_parallel);
        EXPECT_EQ(
            c.config.micro_batch * dp *
                lay_out_run(c.config, ParallelRank{.dp = dp}, {.cpu_isa = process_cpu_isa(), .threads = 1}, 0)
                    .accum,
            base.global_batch);
      }
    }
}

// Where everything fits, each of the 12 precision settings of AdamW's step plans each micro-batch without
// recompute: 48 candidates over only 12 graphs (weights in fp32, bf16 or fp16 at 4 micro-batches), each laid
// out once, whose arenas are packed once. The ranking is unchanged by it: the test above compares every
// candidate with lay_out_run.
TEST(Planner, LaysOutARecurringGraphOnce) {
  const SearchRequest request{.base = tiny_base("gpt2-tiny", 8),
                              .ranks = 1,
                              .device_memory = int64_t{1} << 40,
                              .profile = testing::tested_profile(),
                              .other_optimizers = false};
  const SearchResult result = search_configs(request);
  EXPECT_EQ(result.candidates_planned, 48);
  EXPECT_EQ(result.fitting.size(), 48u);
  EXPECT_EQ(result.graphs_laid_out, 3 * 4);
  EXPECT_LE(result.arenas_packed, 4 * 3 * 4);
  EXPECT_GE(result.arenas_packed, 4);  // at least every micro-batch's activations
}

// Threads search lanes at once and share the graphs: any count lists the same configurations, in the same
// order, with the same bytes and costs.
TEST(Planner, AnyThreadCountListsTheSameConfigurations) {
  const TrainConfig base = tiny_base("llama-tiny", 8);
  SearchRequest request{.base = base, .ranks = 2, .profile = testing::tested_profile()};
  request.device_memory = middle_limit(base, 2);
  std::vector<std::vector<std::pair<std::string, int64_t>>> listed;
  for (int threads : {1, 3}) {
    request.search_threads = threads;
    const SearchResult result = search_configs(request);
    ASSERT_FALSE(result.fitting.empty());
    std::vector<std::pair<std::string, int64_t>> list;
    for (const ConfigCandidate& c : result.fitting)
      list.push_back({describe_config(c.config) + " " + std::to_string(c.cost.step_s), c.rank_bytes});
    listed.push_back(std::move(list));
  }
  EXPECT_EQ(listed[0], listed[1]);
}

// A long search says how far it is: the hook hears every configuration planned, counted from 1.
TEST(Planner, ReportsEachConfigurationPlanned) {
  std::vector<int64_t> heard;
  const SearchRequest request{.base = tiny_base("gpt2-tiny", 8),
                              .ranks = 1,
                              .device_memory = int64_t{1} << 40,
                              .profile = testing::tested_profile(),
                              .on_planned = [&](int64_t planned) { heard.push_back(planned); }};
  const SearchResult result = search_configs(request);
  ASSERT_EQ(static_cast<int64_t>(heard.size()), result.candidates_planned);
  for (size_t k = 0; k < heard.size(); ++k) EXPECT_EQ(heard[k], static_cast<int64_t>(k) + 1);
}

// bf16 without AVX512-BF16 holds conversion tiles: every candidate's bytes are lay_out_run's at the request's
// level.
TEST(Planner, PlansEveryCandidateAtTheRequestsLevel) {
  const TrainConfig base = tiny_base("gpt2-tiny", 8);
  for (CpuIsa isa : {CpuIsa::avx2, CpuIsa::avx512}) {
    const SearchResult result = search_configs({.base = base,
                                                .ranks = 1,
                                                .device_memory = int64_t{1} << 40,
                                                .profile = testing::tested_profile(),
                                                .isa = isa});
    ASSERT_FALSE(result.fitting.empty());
    for (const ConfigCandidate& c : result.fitting)
      EXPECT_EQ(
          c.rank_bytes,
          lay_out_run(c.config, ParallelRank{.dp = 1}, {.cpu_isa = isa, .threads = 1}, 0).plan.bytes.total())
          << describe_config(c.config) << " at " << cpu_isa_name(isa);
  }
}

// On a GPU a candidate fits by what the device commits (each buffer in whole granules) beside the runtime's
// overhead: the search's bytes are lay_out_run's, what the graph cache keeps of a graph included, and it
// never proposes what check_config refuses there.
TEST(Planner, OnAGpuCandidatesFitByTheirCommittedBytes) {
  TrainConfig base = tiny_base("gpt2-tiny", 8);
  base.device = "cuda";
  try {
    check_device(base.device);
  } catch (const Error&) {
    GTEST_SKIP() << "a build without CUDA plans for no GPU";
  }
  const int64_t overhead = int64_t{512} << 20, room = int64_t{50} << 20;
  const SearchResult result = search_configs({.base = base,
                                              .ranks = 1,
                                              .device_memory = overhead + room,
                                              .runtime_overhead = overhead,
                                              .profile = testing::tested_profile(),
                                              .isa = process_cpu_isa()});
  ASSERT_FALSE(result.fitting.empty());
  for (const ConfigCandidate& c : result.fitting) {
    const DeviceTarget gpu = plan_target(base.device, process_cpu_isa(), 1);
    const RunLayout run = lay_out_run(c.config, ParallelRank{.dp = 1}, gpu, 0);
    EXPECT_EQ(c.device_bytes, committed_device_bytes(run.model.graph.table, run.plan).total())
        << describe_config(c.config);
    EXPECT_LE(c.device_bytes, room);
    EXPECT_NE(c.config.optimizer, OptimizerKind::adam_mini);
  }
}

TEST(Planner, RecomputesOnlyAsManyLayersAsNeeded) {
  const TrainConfig base = tiny_base("gpt2-tiny", 8);
  const SearchRequest request{
      .base = base, .ranks = 1, .device_memory = middle_limit(base, 1), .profile = testing::tested_profile()};
  for (const ConfigCandidate& c : search_configs(request).fitting) {
    TrainConfig less = c.config;
    if (c.config.recompute.granularity == RecomputeGranularity::selective) {
      less.recompute = {};
    } else if (c.config.recompute.granularity == RecomputeGranularity::full &&
               c.config.recompute.method == RecomputeMethod::block && c.config.recompute.num_layers > 1) {
      less.recompute.num_layers -= 1;
    } else {
      continue;
    }
    EXPECT_GT(rank_total(less, 1, 0), request.device_memory) << describe_config(c.config);
  }
}

TEST(Planner, Bf16RanksBeforeFp16) {
  const TrainConfig base = tiny_base("gpt2-tiny", 8);
  const SearchRequest request{
      .base = base, .ranks = 1, .device_memory = int64_t{1} << 40, .profile = testing::tested_profile()};
  const SearchResult result = search_configs(request);
  const auto first = [&](Precision p) {
    return std::find_if(result.fitting.begin(), result.fitting.end(),
                        [p](const ConfigCandidate& c) { return c.config.precision.precision == p; });
  };
  ASSERT_NE(first(Precision::fp16), result.fitting.end());
  EXPECT_LT(first(Precision::bf16), first(Precision::fp16));
  ASSERT_FALSE(result.notes.empty());
  EXPECT_EQ(result.notes.front().rfind("agrees: bf16 before fp16", 0), 0u) << result.notes.front();
  // The reason names the level the candidates were planned at, and what its products do.
  const std::string level(cpu_isa_name(request.isa));
  EXPECT_NE(result.notes.front().find(kernels::native_bf16_gemm(request.isa)
                                          ? "fp16 products run as fp32 tiles at " + level + ")"
                                          : "at " + level + " both run their products as fp32 tiles)"),
            std::string::npos)
      << result.notes.front();
}

TEST(Planner, O2OptimizerFirstWhenModelStatesOverflow) {
  // Between plain bf16 and bf16 with bf16 moments, without recompute: the O2 optimizer alone fits, plain
  // bf16 needs recompute.
  TrainConfig plain = with_precision(tiny_base("gpt2-tiny", 1), {.precision = Precision::bf16});
  plain.seq_len = 128;  // activations big enough that recompute could make up for the O2 optimizer
  plain.micro_batch = 1;
  TrainConfig o2 = plain;
  o2.precision.set_moments(MomentDType::bf16);
  const int64_t limit = (rank_total(plain, 1, 0) + rank_total(o2, 1, 0)) / 2;
  const SearchResult result = search_configs({.base = plain,
                                              .ranks = 1,
                                              .device_memory = limit,
                                              .profile = testing::tested_profile(),
                                              .other_optimizers = false});
  const auto& ranked = result.fitting;
  const auto o2_alone = std::find_if(ranked.begin(), ranked.end(), [](const ConfigCandidate& c) {
    return c.config.precision.moments() == MomentDType::bf16 && !c.config.precision.o2_gradient &&
           c.config.recompute.granularity == RecomputeGranularity::none;
  });
  const auto plain_recomputing = std::find_if(ranked.begin(), ranked.end(), [](const ConfigCandidate& c) {
    return c.config.precision.precision == Precision::bf16 &&
           c.config.precision.moments() == MomentDType::fp32 && !c.config.precision.o2_gradient &&
           c.config.recompute.granularity != RecomputeGranularity::none;
  });
  ASSERT_NE(o2_alone, ranked.end());
  ASSERT_NE(plain_recomputing, ranked.end()) << "the limit leaves plain bf16 no room even with recompute";
  EXPECT_LT(o2_alone, plain_recomputing);
  const bool agreed = std::any_of(result.notes.begin(), result.notes.end(), [](const std::string& n) {
    return n.rfind("agrees: O2 optimizer first", 0) == 0;
  });
  EXPECT_TRUE(agreed);
}

bool eight_bit(const ConfigCandidate& c) {
  return c.config.precision.moments() == MomentDType::fp8 ||
         c.config.precision.moments() == MomentDType::int8;
}

// Below the smallest run with 16- or 32-bit moments and above the smallest with 8-bit ones: only 8-bit
// moments fit, each at lay_out_run's bytes, and the advice says so. Which runs are the smallest depends on
// the CPU's level (below AVX512-BF16 a bf16 product needs conversion tiles, which can outweigh a tiny
// model's savings), so an unbounded search finds them.
TEST(Planner, OnlyEightBitMomentsFit) {
  const TrainConfig base = tiny_base("llama-tiny", 4);
  const SearchResult every = search_configs({.base = base,
                                             .ranks = 1,
                                             .device_memory = int64_t{1} << 40,
                                             .profile = testing::tested_profile(),
                                             .other_optimizers = false});
  int64_t smallest_wide = std::numeric_limits<int64_t>::max(), smallest_8bit = smallest_wide;
  for (const ConfigCandidate& c : every.fitting) {
    int64_t& smallest = eight_bit(c) ? smallest_8bit : smallest_wide;
    smallest = std::min(smallest, c.rank_bytes);
  }
  const int64_t limit = (smallest_wide + smallest_8bit) / 2;
  ASSERT_LT(smallest_8bit, limit);
  const SearchResult result = search_configs({.base = base,
                                              .ranks = 1,
                                              .device_memory = limit,
                                              .profile = testing::tested_profile(),
                                              .other_optimizers = false});
  ASSERT_FALSE(result.fitting.empty());
  for (const ConfigCandidate& c : result.fitting) {
    EXPECT_TRUE(eight_bit(c)) << describe_config(c.config);
    EXPECT_EQ(c.rank_bytes, rank_total(c.config, 1, 0)) << describe_config(c.config);
  }
  EXPECT_NE(std::find(result.notes.begin(), result.notes.end(),
                      "8-bit moments at the top: nothing with 16- or 32-bit moments fits"),
            result.notes.end());
  // The printed command line says it in Megatron's flags.
  EXPECT_NE(
      train_command_line(result.fitting.front().config, 1)
          .find(" --exp-avg-dtype " + moment_dtype_name(result.fitting.front().config.precision.moments()) +
                " --exp-avg-sq-dtype "),
      std::string::npos);
}

// With room for everything, 8-bit moments are searched at every precision they work at, and rank below the
// same configuration with bf16 moments: the cost model prices their slower AdamW.
TEST(Planner, EightBitMomentsRankBelowBf16Moments) {
  const TrainConfig base = tiny_base("gpt2-tiny", 8);
  const SearchResult result = search_configs(
      {.base = base, .ranks = 1, .device_memory = int64_t{1} << 40, .profile = testing::tested_profile()});
  std::set<std::pair<Precision, MomentDType>> searched;
  for (const ConfigCandidate& c : result.fitting)
    searched.insert({c.config.precision.precision, c.config.precision.moments()});
  for (Precision p : {Precision::fp32, Precision::bf16})
    for (MomentDType m : {MomentDType::fp8, MomentDType::int8}) EXPECT_TRUE(searched.count({p, m}));
  EXPECT_FALSE(eight_bit(result.fitting.front())) << describe_config(result.fitting.front().config);
  for (const ConfigCandidate& c : result.fitting) {
    if (!eight_bit(c) || c.config.precision.precision != Precision::bf16) continue;
    const auto same_with_bf16 =
        std::find_if(result.fitting.begin(), result.fitting.end(), [&](const auto& o) {
          return o.config.precision.moments() == MomentDType::bf16 &&
                 o.config.precision.o2_gradient == c.config.precision.o2_gradient &&
                 o.config.micro_batch == c.config.micro_batch &&
                 o.config.recompute.granularity == c.config.recompute.granularity;
        });
    ASSERT_NE(same_with_bf16, result.fitting.end()) << describe_config(c.config);
    EXPECT_LT(same_with_bf16->cost.optimizer_s, c.cost.optimizer_s) << describe_config(c.config);
    EXPECT_LT(same_with_bf16 - result.fitting.begin(), &c - result.fitting.data());
  }
}

// Pipeline stages are searched where P divides the layers (with ZeRO 0 or 1 beside them): a candidate holds
// the bytes of its largest stage, which differ (the first holds the embedding and more micro-batches in
// flight, the last the head), and runs at the pace of its slowest, its bubble (P - 1) / (m + P - 1).
TEST(Planner, SearchesPipelineStages) {
  const TrainConfig base = tiny_base("gpt2-tiny", 8);
  for (int world : {2, 4}) {
    const SearchRequest request{.base = base,
                                .ranks = world,
                                .device_memory = int64_t{1} << 40,
                                .profile = testing::tested_profile()};
    const SearchResult result = search_configs(request);
    std::set<std::pair<int, int>> layouts;  // (pipeline stages, ZeRO stage)
    for (const ConfigCandidate& c : result.fitting) {
      const int pp = c.config.pipeline_parallel;
      if (pp == 1) continue;
      layouts.insert({pp, c.config.zero_stage});
      SCOPED_TRACE(describe_config(c.config));
      const int stage_ranks = world / pp;
      const int64_t first = rank_total(c.config, world, 0), last = rank_total(c.config, world, world - 1);
      EXPECT_NE(first, last);
      EXPECT_EQ(c.rank_bytes, largest_rank_total(c.config, world));
      const int dp = stage_ranks / c.config.tensor_parallel;
      const int64_t m = base.global_batch / dp / c.config.micro_batch;
      EXPECT_DOUBLE_EQ(c.cost.bubble_fraction, static_cast<double>(pp - 1) / static_cast<double>(m + pp - 1));
      double slowest = 0;
      for (int stage = 0; stage < pp; ++stage)
        slowest = std::max(slowest, predict_step_cost(rank_layout(c.config, world, stage * stage_ranks),
                                                      c.config, dp, request.profile)
                                        .step_s);
      EXPECT_DOUBLE_EQ(c.cost.step_s, slowest);
    }
    // gpt2-tiny's 2 layers: 2 stages at most; ZeRO-2/3 never beside them.
    const std::set<std::pair<int, int>> expected =
        world == 2 ? std::set<std::pair<int, int>>{{2, 0}} : std::set<std::pair<int, int>>{{2, 0}, {2, 1}};
    EXPECT_EQ(layouts, expected) << world << " ranks";
  }
}

TEST(Planner, CommandLineNamesEveryChosenFlag) {
  TrainConfig c = tiny_base("llama-tiny", 16);
  c.precision = {.precision = Precision::bf16,
                 .exp_avg = MomentDType::bf16,
                 .exp_avg_sq = MomentDType::bf16,
                 .o2_gradient = true};
  c.zero_stage = 2;
  c.micro_batch = 2;
  c.recompute = {
      .granularity = RecomputeGranularity::full, .method = RecomputeMethod::block, .num_layers = 1};
  EXPECT_EQ(train_command_line(c, 4),
            "mpirun -np 4 memtrain train --model llama-tiny --data DATA --train-iters 10 --seq-length 64 "
            "--micro-batch-size 2 --global-batch-size 16 --bf16 --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16 "
            "--main-grads-dtype bf16 --zero-stage 2 "
            "--recompute-granularity full --recompute-method block --recompute-num-layers 1 --threads 1");
  // 8-bit moments at fp32: Megatron's moment flags alone.
  c.precision = {.precision = Precision::fp32};
  c.precision.set_moments(MomentDType::int8);
  c.zero_stage = 0;
  c.recompute = {};
  EXPECT_EQ(train_command_line(c, 1),
            "memtrain train --model llama-tiny --data DATA --train-iters 10 --seq-length 64 "
            "--micro-batch-size 2 --global-batch-size 16 --exp-avg-dtype int8 --exp-avg-sq-dtype int8 "
            "--threads 1");
  EXPECT_EQ(describe_config(c), "fp32 +int8-moments, ZeRO 0, recompute none, micro-batch 2");
  c.pipeline_parallel = 2;
  c.tensor_parallel = 2;
  EXPECT_EQ(train_command_line(c, 8),
            "mpirun -np 8 memtrain train --model llama-tiny --data DATA --train-iters 10 --seq-length 64 "
            "--micro-batch-size 2 --global-batch-size 16 --exp-avg-dtype int8 --exp-avg-sq-dtype int8 "
            "--pipeline-model-parallel-size 2 --tensor-model-parallel-size 2 --threads 1");
  EXPECT_EQ(
      describe_config(c),
      "fp32 +int8-moments, pipeline parallel 2, tensor parallel 2, ZeRO 0, recompute none, micro-batch 2");
}

}  // namespace
}  // namespace mt
