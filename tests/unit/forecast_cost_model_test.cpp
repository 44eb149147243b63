// The cost model's FLOPs against Megatron's count for GPT-2 (Narayanan et al. 2021, appendix): the matrix
// products of one layer's forward are 24 B T C^2 (qkv 6, projection 2, MLP 16) and the LM head's 2 B T C V;
// a backward takes twice its forward, and full recompute reruns each layer's forward once more. Each op's
// time comes from the rate of its own kernel family, and the exchanges from the ZeRO stage's ring volumes
// and, under tensor and pipeline parallelism, from the bytes the ops exchange with the tensor group and the
// stages beside them; a pipeline stage idles its bubble on top.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dist/communicator.h"
#include "forecast/cost_model.h"
#include "plan_test_util.h"

namespace mt {
namespace {

TrainConfig gpt2_tiny(int64_t B, int64_t T, RecomputeConfig recompute) {
  TrainConfig c;
  c.model = "gpt2-tiny";
  c.train_iters = 1;
  c.micro_batch = B;
  c.seq_len = T;
  c.recompute = recompute;
  c.threads = 1;
  return c;
}

StepCost cost_of(const TrainConfig& c) {
  return predict_step_cost(
      lay_out_run(c, ParallelRank{.dp = 1}, {.cpu_isa = process_cpu_isa(), .threads = 1}, 0), c, 1,
      testing::tested_profile());
}

// Causal attention: QK^T and PV over half the T x T scores forward; the backward recomputes the scores and
// takes dP, dV, dQ and dK: 5 products.
double attention_flops(double B, double T, double C, double L, double passes) {
  return passes * 2 * B * T * T * C / 2 * L;
}

TEST(CostModel, FlopsFollowMegatronsCount) {
  const double B = 2, T = 64, C = 64, L = 2, Vp = 256;
  const double matmuls = 72 * B * T * L * C * C + 6 * B * T * C * Vp;
  EXPECT_DOUBLE_EQ(cost_of(gpt2_tiny(2, 64, {})).flops, matmuls + attention_flops(B, T, C, L, 2 + 5));
  const RecomputeConfig full{.granularity = RecomputeGranularity::full, .method = RecomputeMethod::uniform};
  EXPECT_DOUBLE_EQ(cost_of(gpt2_tiny(2, 64, full)).flops,
                   matmuls + 24 * B * T * L * C * C + attention_flops(B, T, C, L, 2 + 5 + 2));
  // Selective recompute reruns only elementwise ops: no extra FLOPs, more memory traffic.
  const StepCost selective = cost_of(gpt2_tiny(2, 64, {.granularity = RecomputeGranularity::selective}));
  EXPECT_DOUBLE_EQ(selective.flops, matmuls + attention_flops(B, T, C, L, 2 + 5));
  EXPECT_GT(selective.elementwise_s, cost_of(gpt2_tiny(2, 64, {})).elementwise_s);
}

// Each op is priced at the rate of the kernel that runs it: making one kernel family of the profile twice as
// fast halves exactly the ops of that family and leaves every other op alone; every op belongs to a family.
TEST(CostModel, EachOpAtItsKernelsRate) {
  TrainConfig c = gpt2_tiny(2, 64, {});
  c.precision.precision = Precision::bf16;
  const RunLayout run =
      lay_out_run(c, ParallelRank{.dp = 1}, {.cpu_isa = process_cpu_isa(), .threads = 1}, 0);
  const HardwareProfile base = testing::tested_profile();
  const auto twice = [](LinearCurve& curve) {
    for (auto& by_rows : curve.gflops)
      for (double& rate : by_rows) rate *= 2;
  };
  const std::vector<std::pair<std::function<void(HardwareProfile&)>, std::set<OpKind>>> families = {
      {[&](HardwareProfile& p) { twice(p.bf16.forward); }, {OpKind::linear}},
      {[&](HardwareProfile& p) { twice(p.bf16.backward); }, {OpKind::linear_backward}},
      {[](HardwareProfile& p) { p.lm_head_gflops[1] *= 2; }, {OpKind::lm_head_loss}},
      {[](HardwareProfile& p) { p.attention_gflops[1] *= 2; },
       {OpKind::attention, OpKind::attention_backward}},
      {[](HardwareProfile& p) { p.activation_melems *= 2; }, {OpKind::gelu, OpKind::gelu_backward}},
      {[](HardwareProfile& p) { p.norm_melems *= 2; }, {OpKind::layernorm, OpKind::layernorm_backward}},
      {[](HardwareProfile& p) { p.memory_gbps *= 2; },
       {OpKind::embedding, OpKind::embedding_backward, OpKind::zero}},
  };
  std::set<OpKind> priced;
  for (const auto& [faster, kinds] : families) {
    HardwareProfile p = base;
    faster(p);
    for (const Op& op : run.model.graph.ops) {
      const double before = predict_op_cost(run.model.graph.table, op, run.spec, base, 1).seconds;
      const double after = predict_op_cost(run.model.graph.table, op, run.spec, p, 1).seconds;
      if (before == 0) continue;  // an op with no work (a zero-sized tensor)
      EXPECT_NEAR(before / after, kinds.count(op.kind()) ? 2.0 : 1.0, 1e-12) << op.name;
    }
    priced.insert(kinds.begin(), kinds.end());
  }
  for (const Op& op : run.model.graph.ops)
    EXPECT_TRUE(priced.count(op.kind())) << op.name << " has no family";
  // The optimizer's part: AdamW at its moments' rate.
  HardwareProfile p = base;
  p.adamw_mparams.fp32_moments *= 2;
  EXPECT_LT(predict_step_cost(run, c, 1, p).optimizer_s, predict_step_cost(run, c, 1, base).optimizer_s);
}

// AdamW over the shard at the rate of the run's moments: with the gradients' zeroing and norm, the
// optimizer's time is exactly N / rate for each moment dtype; a profile without the 8-bit rates (calibrated
// before them) prices 8-bit moments with the shipped profile's of its level and threads.
TEST(CostModel, AdamWAtItsMomentsRate) {
  const HardwareProfile& profile = testing::tested_profile();
  HardwareProfile older = profile;
  older.adamw_mparams.fp8_moments.reset();
  older.adamw_mparams.int8_moments.reset();
  older.cpu_isa = CpuIsa::avx2;  // whose shipped rates are not tested_profile's
  const HardwareProfile& avx2 = shipped_hardware_profile(CpuIsa::avx2, older.threads);
  for (MomentDType moments : {MomentDType::fp32, MomentDType::bf16, MomentDType::fp8, MomentDType::int8}) {
    TrainConfig c = gpt2_tiny(2, 64, {});
    c.precision.precision = Precision::bf16;
    c.precision.set_moments(moments);
    const RunLayout run =
        lay_out_run(c, ParallelRank{.dp = 1}, {.cpu_isa = process_cpu_isa(), .threads = 1}, 0);
    const double params = static_cast<double>(run.plan.num_params);
    const double zeroing = 2 * static_cast<double>(run.plan.bytes[Category::grads]);
    const auto adamw_s = [&](const HardwareProfile& p) {
      return predict_step_cost(run, c, 1, p).optimizer_s - zeroing / (p.memory_gbps * 1e9);
    };
    SCOPED_TRACE(moment_dtype_name(moments));
    const double rate = *profile.adamw_mparams.of(run.plan.policy.moments);
    EXPECT_NEAR(adamw_s(profile), params / (rate * 1e6), 1e-12);
    const bool eight_bit = moments == MomentDType::fp8 || moments == MomentDType::int8;
    const double older_rate = *(eight_bit ? avx2 : older).adamw_mparams.of(run.plan.policy.moments);
    EXPECT_NEAR(adamw_s(older), params / (older_rate * 1e6), 1e-12);
  }
  // The kernels the shipped profiles measured: 8-bit moments update slower than bf16 ones.
  EXPECT_LT(*profile.adamw_mparams.int8_moments, profile.adamw_mparams.bf16_moments);
  EXPECT_LT(*profile.adamw_mparams.fp8_moments, profile.adamw_mparams.bf16_moments);
}

TEST(CostModel, AccumulationScalesComputeNotTheOptimizer) {
  TrainConfig one = gpt2_tiny(2, 64, {});
  TrainConfig four = one;
  four.grad_accum_steps = 4;
  const StepCost a = cost_of(one), b = cost_of(four);
  EXPECT_DOUBLE_EQ(b.flops, 4 * a.flops);
  EXPECT_DOUBLE_EQ(b.optimizer_s, a.optimizer_s);
  EXPECT_NEAR(b.tokens_per_sec / a.tokens_per_sec, 4 * a.step_s / b.step_s, 1e-9);
}

TEST(CostModel, CommunicationPerZeroStage) {
  // Ring volumes over 4 ranks, fp32 gradients and weights (4 bytes each): stage 0 all-reduces the gradients
  // (2 (N-1)/N), stage 1 reduces them and gathers the weights, stage 3 also gathers weights forward and back.
  TrainConfig c = gpt2_tiny(1, 64, {});
  c.overlap_comm = false;
  HardwareProfile profile = testing::tested_profile();
  profile.mpi_gbps = 1;
  std::vector<double> seconds;
  int64_t params = 0;
  for (int stage = 0; stage <= 3; ++stage) {
    c.zero_stage = stage;
    const RunLayout run = lay_out_run(c, ParallelRank{.dp = 4}, {.cpu_isa = process_cpu_isa(), .threads = 1},
                                      mpi_buffer_bytes(4));
    params = run.plan.num_params;
    const StepCost cost = predict_step_cost(run, c, 4, profile);
    EXPECT_DOUBLE_EQ(cost.comm_exposed_s, cost.comm_s);
    seconds.push_back(cost.comm_s);
  }
  const double bytes = 4.0 * static_cast<double>(params) * 3 / 4 / 1e9;
  EXPECT_DOUBLE_EQ(seconds[0], 2 * bytes);
  EXPECT_DOUBLE_EQ(seconds[1], 2 * bytes);
  EXPECT_DOUBLE_EQ(seconds[2], 2 * bytes);
  EXPECT_DOUBLE_EQ(seconds[3], 3 * bytes);
}

TrainConfig tensor_parallel(TrainConfig c, int tp) {
  c.tensor_parallel = tp;
  return c;
}

// Each tensor-parallel rank runs 1/tp of every product: column- and row-parallel linears, this rank's heads
// of attention, its rows of the vocabulary in the LM head; nothing else has FLOPs.
TEST(CostModel, TensorParallelRankRunsItsShareOfTheFlops) {
  const TrainConfig one = gpt2_tiny(2, 64, {}), two = tensor_parallel(one, 2);
  const RunLayout whole = lay_out_run(one, ParallelRank{.dp = 1},
                                      {.cpu_isa = process_cpu_isa(), .threads = 1}, 0),
                  half = lay_out_run(two, ParallelRank{.dp = 1}, {.cpu_isa = process_cpu_isa(), .threads = 1},
                                     0);
  const HardwareProfile& profile = testing::tested_profile();
  EXPECT_DOUBLE_EQ(cost_of(two).flops, cost_of(one).flops / 2);
  std::map<std::string, double> whole_attention;
  for (const Op& op : whole.model.graph.ops)
    if (op.kind() == OpKind::attention || op.kind() == OpKind::attention_backward)
      whole_attention[op.name] = predict_op_cost(whole.model.graph.table, op, whole.spec, profile, 1).flops;
  int attention_ops = 0;
  for (const Op& op : half.model.graph.ops) {
    if (op.kind() != OpKind::attention && op.kind() != OpKind::attention_backward) continue;
    ++attention_ops;
    const double flops = predict_op_cost(half.model.graph.table, op, half.spec, profile, 2).flops;
    EXPECT_GT(flops, 0) << op.name;
    EXPECT_DOUBLE_EQ(flops, whole_attention.at(op.name) / 2) << op.name;
  }
  EXPECT_EQ(attention_ops, static_cast<int>(whole_attention.size()));
}

// The tensor group's exchanges at the MPI bus bandwidth, as the MPI communicator moves them among tp ranks:
// an all-reduce 2 (tp-1)/tp of its tensor, the LM head's gather (tp-1)/tp of every rank's 3 floats a row;
// all of it exposed, beside the ZeRO exchanges of the data-parallel group, in the step's time.
TEST(CostModel, TensorParallelExchangesAtTheMpiBandwidth) {
  TrainConfig c = tensor_parallel(gpt2_tiny(2, 64, {}), 4);
  c.precision.precision = Precision::bf16;
  c.overlap_comm = false;
  HardwareProfile profile = testing::tested_profile();
  profile.mpi_gbps = 2;
  const double tp = 4, rows = 2 * 64, bytes_per_second = 2e9;
  const RunLayout run = lay_out_run(c, ParallelRank{.dp = 2}, {.cpu_isa = process_cpu_isa(), .threads = 1},
                                    mpi_buffer_bytes(2));
  const TensorTable& table = run.model.graph.table;
  double exchanges_s = 0;
  int all_reduces = 0;
  for (const Op& op : run.model.graph.ops) {
    const OpCost cost = predict_op_cost(table, op, run.spec, profile, 4);
    exchanges_s += cost.comm_s;
    if (op.kind() == OpKind::lm_head_loss) {
      EXPECT_DOUBLE_EQ(cost.comm_s, (tp - 1) / tp * (tp * 3 * rows * 4) / bytes_per_second);
      EXPECT_GT(cost.seconds, cost.comm_s);
    } else if (op.kind() == OpKind::all_reduce) {
      ++all_reduces;
      const double bytes = static_cast<double>(table[op.as<ops::AllReduce>().data].bytes());
      EXPECT_DOUBLE_EQ(cost.seconds, 2 * (tp - 1) / tp * bytes / bytes_per_second) << op.name;
      EXPECT_DOUBLE_EQ(cost.comm_s, cost.seconds) << op.name;
    } else {
      EXPECT_EQ(cost.comm_s, 0) << op.name;
    }
  }
  EXPECT_GT(all_reduces, 0);
  const StepCost step = predict_step_cost(run, c, 2, profile);
  EXPECT_DOUBLE_EQ(step.tp_comm_s, exchanges_s);
  // Stage 0 over the 2 data-parallel ranks: the gradients of this tensor rank's parameters all-reduced.
  const double grads =
      static_cast<double>(run.plan.num_params) * static_cast<double>(dtype_size(run.plan.policy.grads));
  EXPECT_DOUBLE_EQ(step.comm_s, 2 * grads / 2 / bytes_per_second);
  EXPECT_DOUBLE_EQ(step.step_s, step.matmul_s + step.attention_s + step.elementwise_s + step.optimizer_s +
                                    step.comm_exposed_s + step.tp_comm_s);
  EXPECT_EQ(cost_of(gpt2_tiny(2, 64, {})).tp_comm_s, 0);
}

// Sequence parallel: an all-gather receives (tp-1)/tp of its whole output, a reduce-scatter sends (tp-1)/tp
// of its whole partial sum; exposed like the all-reduces they replace.
TEST(CostModel, SequenceParallelExchangesAtTheMpiBandwidth) {
  TrainConfig c = tensor_parallel(gpt2_tiny(2, 64, {}), 4);
  c.sequence_parallel = true;
  HardwareProfile profile = testing::tested_profile();
  profile.mpi_gbps = 2;
  const RunLayout run =
      lay_out_run(c, ParallelRank{.dp = 1}, {.cpu_isa = process_cpu_isa(), .threads = 1}, 0);
  const TensorTable& table = run.model.graph.table;
  int gathers = 0, scatters = 0;
  for (const Op& op : run.model.graph.ops) {
    const OpCost cost = predict_op_cost(table, op, run.spec, profile, 4);
    if (op.kind() == OpKind::all_gather) {
      ++gathers;
      const double whole = static_cast<double>(table[op.as<ops::AllGather>().out].bytes());
      EXPECT_DOUBLE_EQ(cost.seconds, 0.75 * whole / 2e9) << op.name;
    } else if (op.kind() == OpKind::reduce_scatter) {
      ++scatters;
      const double whole = static_cast<double>(table[op.as<ops::ReduceScatter>().inp].bytes());
      EXPECT_DOUBLE_EQ(cost.seconds, 0.75 * whole / 2e9) << op.name;
    } else {
      continue;
    }
    EXPECT_DOUBLE_EQ(cost.comm_s, cost.seconds) << op.name;
  }
  EXPECT_GT(gathers, 0);
  EXPECT_GT(scatters, 0);
}

TrainConfig pipelined(TrainConfig c, int pp, int64_t global_batch) {
  c.pipeline_parallel = pp;
  c.global_batch = global_batch;
  return c;
}

RunLayout stage_layout(const TrainConfig& c, int stage) {
  return lay_out_run(c, ParallelRank{.dp = 1, .pp_rank = stage}, {.cpu_isa = process_cpu_isa(), .threads = 1},
                     0);
}

// A stage's graph holds all the step's micro-batches, each of its layers' ops once per micro-batch: the
// stages' FLOPs add up to the whole model's over the same micro-batches.
TEST(CostModel, PipelineStagesShareTheStepsFlops) {
  const TrainConfig whole = pipelined(gpt2_tiny(2, 64, {}), 1, 8);
  const TrainConfig two = pipelined(whole, 2, 8);
  const HardwareProfile& profile = testing::tested_profile();
  double stages = 0;
  for (int stage = 0; stage < 2; ++stage)
    stages += predict_step_cost(stage_layout(two, stage), two, 1, profile).flops;
  EXPECT_DOUBLE_EQ(stages, cost_of(whole).flops);
}

// The stages' sends and receives at the MPI bandwidth, each byte once, all exposed; the first and last stage
// also sum the tied embedding's gradient between them (an all-reduce of 2 ranks). With m micro-batches over P
// stages the stage idles (P - 1) / m of its passes' time: (P - 1) / (m + P - 1) of the passes and the bubble.
TEST(CostModel, PipelineExchangesAndBubble) {
  HardwareProfile profile = testing::tested_profile();
  profile.mpi_gbps = 2;
  for (const int64_t micro_batches : {1, 4}) {
    const TrainConfig c = pipelined(gpt2_tiny(2, 64, {}), 2, 2 * micro_batches);
    for (int stage = 0; stage < 2; ++stage) {
      SCOPED_TRACE("micro-batches " + std::to_string(micro_batches) + ", stage " + std::to_string(stage));
      const RunLayout run = stage_layout(c, stage);
      const TensorTable& table = run.model.graph.table;
      double sent = 0;
      for (const Op& op : run.model.graph.ops) {
        const OpCost cost = predict_op_cost(table, op, run.spec, profile, 1);
        if (op.kind() != OpKind::pipe_exchange) continue;
        const auto& a = op.as<ops::PipeExchange>();
        const double bytes = static_cast<double>((a.send >= 0 ? table[a.send].bytes() : 0) +
                                                 (a.recv >= 0 ? table[a.recv].bytes() : 0));
        EXPECT_DOUBLE_EQ(cost.seconds, bytes / 2e9) << op.name;
        EXPECT_DOUBLE_EQ(cost.comm_s, cost.seconds) << op.name;
        sent += bytes;
      }
      // Every micro-batch's residual stream [B, T, C] in fp32 crosses the boundary twice (forward, backward).
      EXPECT_DOUBLE_EQ(sent, 2.0 * static_cast<double>(micro_batches) * 2 * 64 * 64 * 4);
      const double tied = 2 * 0.5 * 256 * 64 * 4;  // both ends hold the tied embedding [256, 64]
      const StepCost step = predict_step_cost(run, c, 1, profile);
      EXPECT_DOUBLE_EQ(step.pp_comm_s, (sent + tied) / 2e9);
      const double passes = step.matmul_s + step.attention_s + step.elementwise_s + sent / 2e9;
      EXPECT_NEAR(step.bubble_s, passes / static_cast<double>(micro_batches), 1e-15);
      EXPECT_DOUBLE_EQ(step.bubble_fraction, 1.0 / static_cast<double>(micro_batches + 1));
      EXPECT_NEAR(step.bubble_s / (passes + step.bubble_s), step.bubble_fraction, 1e-12);
      EXPECT_NEAR(step.step_s, passes + step.bubble_s + tied / 2e9 + step.optimizer_s + step.comm_exposed_s,
                  1e-15);
    }
  }
  const StepCost alone = cost_of(gpt2_tiny(2, 64, {}));
  EXPECT_EQ(alone.pp_comm_s, 0);
  EXPECT_EQ(alone.bubble_s, 0);
  EXPECT_EQ(alone.bubble_fraction, 0);
}

}  // namespace
}  // namespace mt
