// Activation recompute: every mode gives bitwise the losses and gradients of no recompute, keeps exactly the
// activations its rule says at the loss (counted by hand), and allocates exactly its plan.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "exec/executor.h"
#include "memory/allocation.h"
#include "memory/plan.h"
#include "model/gpt2.h"
#include "model/model.h"
#include "model/recompute.h"
#include "model_test_util.h"
#include "optim/adamw.h"
#include "tests/device_test_util.h"

namespace mt {
namespace {

// Four layers, so that groups of 2 and 3 and blocks of 1 and 3 differ.
const ModelSpec kSpec = testing::small_gpt2_spec(4);
// The same depth in the LLaMA family: grouped queries, untied head.
const ModelSpec kLlamaSpec{.name = "recompute-llama",
                           .arch = Arch::llama,
                           .n_layer = 4,
                           .n_head = 4,
                           .n_kv_head = 2,
                           .n_embd = 64,
                           .intermediate_size = 160,
                           .n_positions = 64,
                           .vocab_size = 256,
                           .padded_vocab_size = 256,
                           .tied_head = false};
constexpr int64_t B = 2, T = 32, C = 64, H = 4, L = 4;

RecomputeConfig full(RecomputeMethod method, int64_t n) {
  return {.granularity = RecomputeGranularity::full, .method = method, .num_layers = n};
}

const RecomputeConfig kModes[] = {
    {.granularity = RecomputeGranularity::selective},
    full(RecomputeMethod::uniform, 1),
    full(RecomputeMethod::uniform, 3),  // groups [0,3) and [3,4)
    full(RecomputeMethod::block, 1),
    full(RecomputeMethod::block, 3),
};

struct Trained {
  double first_loss = 0, second_loss = 0;
  std::vector<char> grads, params;
  Plan plan;
  CategoryBytes measured;
};

// Two AdamW steps on fixed batches; returns the losses, the last step's gradients and the final weights.
Trained train_two_steps(const ModelSpec& spec, const RecomputeConfig& recompute, DType dtype) {
  const ModelGraph m = build_model_graph(
      spec, testing::on_cpu(spec, {.batch = B, .seq_len = T, .dtype = dtype, .recompute = recompute}));
  const ModelStatePolicy policy{.weights = dtype, .master_weights = dtype != DType::f32};
  Trained out;
  out.plan = make_plan(m.graph.table, testing::kAlignment, policy);
  Allocation memory(m.graph.table, out.plan, testing::cpu_backend(out.plan.policy));
  init_model_params(spec, m, memory, 3);
  std::vector<ParamGroup> groups;
  for (int id : m.params) groups.push_back({id, weight_decays(m.graph.table[id])});
  AdamW optimizer({}, groups);
  Executor exec(spec, m.graph, memory, testing::cpu_backend(out.plan.policy));
  for (int step = 0; step < 2; ++step) {
    for (int64_t i = 0; i < B * T; ++i) {
      memory.i32(m.batch().tokens)[i] = static_cast<int32_t>((i * 31 + step * 7) % 256);
      memory.i32(m.batch().targets)[i] = static_cast<int32_t>((i * 17 + step * 5 + 1) % 256);
    }
    std::memset(memory.grads(), 0, out.plan.bytes[Category::grads]);
    (step == 0 ? out.first_loss : out.second_loss) = testing::train_step(exec, m, memory, 1.0f);
    optimizer.step(memory, 1e-3f, 1.0f);
  }
  const char* g = static_cast<const char*>(memory.grads());
  const char* p = static_cast<const char*>(memory.params());
  out.grads.assign(g, g + out.plan.bytes[Category::grads]);
  out.params.assign(p, p + out.plan.bytes[Category::params]);
  out.measured = memory.measured();
  return out;
}

TEST(ModelRecompute, EveryModeIsBitwiseTheRunWithoutRecompute) {
  for (const ModelSpec* spec : {&kSpec, &kLlamaSpec}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      const Trained reference = train_two_steps(*spec, {}, dtype);
      for (const RecomputeConfig& mode : kModes) {
        SCOPED_TRACE(spec->name + " " + recompute_name(mode) + " " + std::string(dtype_name(dtype)));
        const Trained run = train_two_steps(*spec, mode, dtype);
        EXPECT_EQ(run.first_loss, reference.first_loss);
        EXPECT_EQ(run.second_loss, reference.second_loss);
        EXPECT_TRUE(run.grads == reference.grads) << "gradients differ";
        EXPECT_TRUE(run.params == reference.params) << "weights differ";
        EXPECT_EQ(run.measured.bytes, run.plan.bytes.bytes);
        EXPECT_LT(run.plan.activations.size, reference.plan.activations.size);
      }
    }
  }
}

// Bytes of activations alive while the loss op runs: what the forward kept for the backward.
int64_t live_at_loss(const Graph& g) {
  int64_t bytes = 0;
  for (const TensorDesc& t : g.table.tensors())
    if (t.category == Category::activations && t.first_op <= g.loss_op && g.loss_op <= t.last_op)
      bytes += t.bytes();
  return bytes;
}

TEST(ModelRecompute, KeptActivationsMatchHandCount) {
  // u: one [B,T,C] fp32 tensor; s: one LayerNorm statistic [B,T]; a: the attention lse [B,H,T].
  const int64_t u = B * T * C * 4, s = B * T * 4, a = B * H * T * 4;
  // Beside the layers: the embedding output, ln_f's output and statistics, and the head's input gradient.
  const int64_t outside = u + u + 2 * s + u;
  const int64_t whole_layer =
      16 * u + 4 * s + a;  // ln_1 1, qkv 3, attn 1, residual 1, ln_2 1, fc 4, gelu 4, out 1
  struct Case {
    RecomputeConfig mode;
    int64_t kept;
  };
  const Case cases[] = {
      {{}, L * whole_layer + outside},
      // Selective drops both LayerNorm outputs with their statistics and the GELU output.
      {{.granularity = RecomputeGranularity::selective}, L * (whole_layer - 6 * u - 4 * s) + outside},
      // Full: each group keeps its input; the last layer's output stays as ln_f's input.
      {full(RecomputeMethod::uniform, 1), L * u + outside},
      {full(RecomputeMethod::uniform, 3), 2 * u + outside},
      {full(RecomputeMethod::uniform, 4), 1 * u + outside},
      // Block: the first N layers keep their outputs only (the next layer's input).
      {full(RecomputeMethod::block, 1), 1 * u + (L - 1) * whole_layer + outside},
      {full(RecomputeMethod::block, 3), 3 * u + (L - 3) * whole_layer + outside},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(recompute_name(c.mode));
    const ModelGraph m = build_gpt2_graph(kSpec, {.batch = B, .seq_len = T, .recompute = c.mode});
    EXPECT_EQ(live_at_loss(m.graph), c.kept);
    const Plan plan = make_plan(m.graph.table, testing::kAlignment, {});
    EXPECT_GE(plan.activations.size, c.kept);
    EXPECT_LT(plan.activations.size, plan.activations.sum_of_tensors);
  }
}

TEST(ModelRecompute, FlagRules) {
  auto usage_error = [](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return e.kind() == ErrorKind::usage;
    }
    return false;
  };
  EXPECT_EQ(parse_recompute("", "", 0, true).granularity, RecomputeGranularity::selective);
  EXPECT_EQ(parse_recompute("full", "block", 2, false).method, RecomputeMethod::block);
  EXPECT_TRUE(usage_error([] { parse_recompute("partial", "", 0, false); }));
  EXPECT_TRUE(usage_error([] { parse_recompute("selective", "uniform", 0, false); }));
  EXPECT_TRUE(usage_error([] { parse_recompute("", "", 2, false); }));
  EXPECT_TRUE(usage_error([] { parse_recompute("full", "", 0, true); }));
  EXPECT_TRUE(usage_error([] { full_recompute_groups(full(RecomputeMethod::uniform, 5), 4); }));
  EXPECT_EQ(full_recompute_groups(full(RecomputeMethod::uniform, 3), 4), (std::vector<int64_t>{0, 0, 0, 3}));
  EXPECT_EQ(full_recompute_groups(full(RecomputeMethod::block, 2), 4), (std::vector<int64_t>{0, 1, -1, -1}));
}

}  // namespace
}  // namespace mt
