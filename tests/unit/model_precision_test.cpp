// Mixed precision at the model level: the bytes per parameter each policy plans and allocates, 16-bit
// activations, 16-bit steps against the fp32 step on the same weights, and gradient accumulation against one
// large batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "exec/executor.h"
#include "memory/allocation.h"
#include "memory/plan.h"
#include "memory/precision.h"
#include "model/gpt2.h"
#include "model/model.h"
#include "optim/adamw.h"
#include "tests/device_test_util.h"

namespace mt {
namespace {

PrecisionConfig mode(Precision p, bool o2_optimizer = false, bool o2_gradient = false, bool master = true) {
  const MomentDType moments = o2_optimizer ? MomentDType::bf16 : MomentDType::fp32;
  return {.precision = p,
          .exp_avg = moments,
          .exp_avg_sq = moments,
          .o2_gradient = o2_gradient,
          .master_weights = master};
}

int64_t model_state_bytes(const Plan& plan) {
  return plan.bytes[Category::params] + plan.bytes[Category::master] + plan.bytes[Category::grads] +
         plan.bytes[Category::optim];
}

// A model, its plan and memory, initialised from one seed, with a fixed batch of B sequences.
struct TinyRun {
  ModelSpec spec = resolve_model("gpt2-tiny", 64);
  ModelGraph model;
  Plan plan;
  Allocation memory;

  TinyRun(const PrecisionConfig& precision, int64_t B, int64_t T)
      : model(build_gpt2_graph(
            spec,
            testing::on_cpu(spec, {.batch = B, .seq_len = T, .dtype = compute_dtype(precision.precision)}))),
        plan(make_plan(model.graph.table, testing::kAlignment, model_state_policy(precision))),
        memory(model.graph.table, plan, testing::cpu_backend(plan.policy)) {
    init_gpt2_params(spec, model, memory, 7);
  }

  Executor executor() { return Executor(spec, model.graph, memory, testing::cpu_backend(plan.policy)); }
  // One step of the loaded batch through `exec`, or a fresh executor; its loss.
  double train(Executor& exec, float grad_scale) {
    return testing::train_step(exec, model, memory, grad_scale);
  }
  double train(float grad_scale) {
    Executor exec = executor();
    return train(exec, grad_scale);
  }

  // Batch rows [first, first + B) of a fixed token stream.
  void load_rows(int64_t first) {
    const TensorDesc& t = model.graph.table[model.batch().tokens];
    const int64_t n = t.numel(), offset = first * t.shape[1];
    for (int64_t i = 0; i < n; ++i) {
      memory.i32(model.batch().tokens)[i] = static_cast<int32_t>(((offset + i) * 37 + 11) % 256);
      memory.i32(model.batch().targets)[i] = static_cast<int32_t>(((offset + i) * 53 + 5) % 256);
    }
  }

  std::vector<float> grads() const {
    const float* g = static_cast<const float*>(memory.grads());
    return {g, g + memory.num_params()};
  }
};

double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff / norm);
}

TEST(ModelPrecision, BytesPerParameterOfEveryPolicy) {
  struct Case {
    PrecisionConfig precision;
    int64_t bytes;
  };
  const Case cases[] = {
      {mode(Precision::fp32), 16},
      {mode(Precision::bf16), 18},
      {mode(Precision::fp16), 18},
      {mode(Precision::bf16, true), 14},
      {mode(Precision::bf16, false, true), 16},
      {mode(Precision::bf16, true, true), 12},
      {mode(Precision::bf16, true, true, false), 8},
  };
  for (const Case& c : cases) {
    TinyRun run(c.precision, 2, 16);
    SCOPED_TRACE(precision_name(c.precision.precision) + " o2 " + moment_dtype_name(c.precision.moments()) +
                 std::to_string(c.precision.o2_gradient) + " master " +
                 std::to_string(c.precision.master_weights));
    EXPECT_EQ(model_state_bytes(run.plan), c.bytes * run.plan.num_params);
    run.load_rows(0);
    run.train(1.0f);  // the arenas reach their peaks
    EXPECT_EQ(run.memory.measured().bytes, run.plan.bytes.bytes);
  }
}

// Every activation except the fp32 statistics (LayerNorm mean/rstd, attention lse) is 16-bit; the hand count
// is that of memory_plan_test's fp32 count with 2 bytes in place of 4.
TEST(ModelPrecision, ActivationsAre16BitExceptStatistics) {
  const int64_t B = 2, T = 32, C = 64, H = 4, L = 2, BT = B * T;
  const TinyRun run(mode(Precision::bf16), B, T);
  const int64_t values = L * 26 * BT * C + 4 * BT * C;  // saved + gradients per layer; embedding, ln_f, grads
  const int64_t stats = L * (4 * BT + B * H * T) + 2 * BT;
  EXPECT_EQ(run.plan.activations.sum_of_tensors, 2 * values + 4 * stats);
  const TinyRun fp32(mode(Precision::fp32), B, T);
  EXPECT_EQ(fp32.plan.activations.sum_of_tensors, 4 * values + 4 * stats);
  EXPECT_LT(run.plan.activations.size, fp32.plan.activations.size);
}

TEST(ModelPrecision, SixteenBitStepMatchesFp32OnTheSameWeights) {
  TinyRun reference(mode(Precision::fp32), 4, 32);
  reference.load_rows(0);
  const double loss = reference.train(1.0f);
  for (Precision p : {Precision::bf16, Precision::fp16}) {
    SCOPED_TRACE(precision_name(p));
    TinyRun run(mode(p), 4, 32);
    run.load_rows(0);
    const double loss16 = run.train(1.0f);
    EXPECT_NEAR(loss16, loss, 1e-2 * loss);
    EXPECT_LT(relative_l2(run.grads(), reference.grads()), p == Precision::bf16 ? 5e-2 : 1e-2);
    EXPECT_EQ(run.memory.measured().bytes, run.plan.bytes.bytes);
  }
}

// k micro-batches of b rows, each loss weighted 1/k, give the gradients of one batch of k*b rows.
TEST(ModelPrecision, AccumulatedMicroBatchesEqualOneLargeBatch) {
  TinyRun big(mode(Precision::fp32), 4, 32);
  big.load_rows(0);
  const double big_loss = big.train(1.0f);
  for (int64_t k : {2, 4}) {
    SCOPED_TRACE(k);
    TinyRun micro(mode(Precision::fp32), 4 / k, 32);
    Executor exec = micro.executor();
    double loss = 0;
    for (int64_t i = 0; i < k; ++i) {
      micro.load_rows(i * (4 / k));
      loss += micro.train(exec, 1.0f / static_cast<float>(k)) / static_cast<double>(k);
    }
    EXPECT_NEAR(loss, big_loss, 1e-6 * big_loss);
    EXPECT_LT(relative_l2(micro.grads(), big.grads()), 1e-5);
  }
}

TEST(ModelPrecision, EveryPolicyTrainsAndKeepsItsPlan) {
  for (const PrecisionConfig& p : {mode(Precision::bf16, true), mode(Precision::bf16, false, true),
                                   mode(Precision::bf16, true, true, false), mode(Precision::fp16)}) {
    TinyRun run(p, 2, 32);
    Executor exec = run.executor();
    AdamW optimizer({}, [&] {
      std::vector<ParamGroup> groups;
      for (int id : run.model.params) groups.push_back({id, weight_decays(run.model.graph.table[id])});
      return groups;
    }());
    run.load_rows(0);
    double first = 0, last = 0;
    for (int step = 1; step <= 8; ++step) {
      std::memset(run.memory.grads(), 0, run.plan.bytes[Category::grads]);
      last = run.train(exec, 1.0f);
      if (step == 1) first = last;
      EXPECT_FALSE(optimizer.step(run.memory, 1e-2f, 1.0f).skipped);
    }
    EXPECT_LT(last, first - 0.1);  // the same batch again and again: the loss must fall
    EXPECT_EQ(run.memory.measured().bytes, run.plan.bytes.bytes);
  }
}

TEST(ModelPrecision, ImpossibleCombinationsAreUsageErrors) {
  for (const PrecisionConfig& p : {mode(Precision::fp32, true), mode(Precision::fp16, false, true),
                                   mode(Precision::fp32, false, false, false)}) {
    try {
      check_precision(p);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::usage);
    }
  }
  EXPECT_NO_THROW(check_precision(mode(Precision::bf16, true, true, false)));
}

}  // namespace
}  // namespace mt
