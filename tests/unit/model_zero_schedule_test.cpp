#include <gtest/gtest.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "memory/plan.h"
#include "model/gpt2.h"
#include "model/zero_schedule.h"
#include "model_test_util.h"
#include "tests/device_test_util.h"

namespace mt {
namespace {

// Hand count for GPT-2 with L layers: forward windows embed, L layers, ln_f; then the head (wte again),
// ln_f's backward, L layers and the embedding's backward.
TEST(ZeroSchedule, Gpt2WindowsFollowTheBlocks) {
  ModelSpec spec = testing::small_gpt2_spec(3);
  ModelGraph m = build_gpt2_graph(spec, {.batch = 2, .seq_len = 16});
  const ZeroSchedule s = add_zero_schedule(m.graph, 3, DType::f32);
  const int L = 3;
  ASSERT_EQ(s.windows.size(), static_cast<size_t>(2 * L + 5));
  EXPECT_EQ(s.windows[0].block, 0);
  EXPECT_EQ(s.windows[L + 2].block, 0);  // the tied head reads wte
  EXPECT_EQ(s.windows.back().block, 0);
  for (int l = 0; l < L; ++l) {
    EXPECT_EQ(s.windows[1 + l].block, 1 + l);
    EXPECT_EQ(s.windows[L + 3 + 1 + l].block, L - l);  // backward runs the layers in reverse
  }
  const TensorTable& t = m.graph.table;
  for (size_t w = 0; w < s.windows.size(); ++w) {
    const BlockWindow& window = s.windows[w];
    // Forward windows gather weights only; the head and backward windows also sum gradients.
    EXPECT_GE(window.weights, 0);
    EXPECT_EQ(window.grads >= 0, w >= static_cast<size_t>(L + 2)) << w;
    int64_t block_numel = 0;
    for (int id : window.params) block_numel += t[id].numel();
    EXPECT_EQ(t[window.weights].numel(), block_numel);
    // Weights are prefetched during the window before; gradients are reduced during the window after.
    EXPECT_EQ(t[window.weights].first_op, w > 0 ? s.windows[w - 1].first_op : window.first_op);
    EXPECT_EQ(t[window.weights].last_op, window.last_op);
    if (window.grads >= 0 && w + 1 < s.windows.size()) {
      EXPECT_EQ(t[window.grads].first_op, window.first_op);
      EXPECT_EQ(t[window.grads].last_op, s.windows[w + 1].last_op);
    }
    if (w > 0) {
      EXPECT_GT(window.first_op, s.windows[w - 1].last_op);
    }
  }
  // Every op that reads parameters lies in a window of their block and names the window's buffers: its
  // gathered weights, and its gradient sum when the op writes gradients.
  for (int i = 0; i < static_cast<int>(m.graph.ops.size()); ++i) {
    const Op& op = m.graph.ops[i];
    const int block = param_block(t, op);
    if (block < 0) {
      EXPECT_EQ(op.window.weights, -1) << op.name;
      continue;
    }
    ASSERT_GE(s.window_of_op[i], 0) << op.name;
    const BlockWindow& window = s.windows[s.window_of_op[i]];
    EXPECT_EQ(window.block, block);
    EXPECT_EQ(op.window.weights, window.weights) << op.name;
    EXPECT_EQ(op.window.first_param, window.params.front()) << op.name;
    const bool backward = op.name.ends_with(".backward") || i == m.graph.loss_op;
    EXPECT_EQ(op.window.grads, backward ? window.grads : -1) << op.name;
  }
}

// Stages 0 and 1 exchange whole gradient buffers: the windows only say when a block's gradients are final,
// which is after exactly one window per block.
TEST(ZeroSchedule, StagesBelowTwoAddNoTensors) {
  const ModelSpec spec = resolve_model("gpt2-tiny", 64);
  ModelGraph m = build_gpt2_graph(spec, {.batch = 2, .seq_len = 16});
  const int tensors = m.graph.table.size();
  const ZeroSchedule s = add_zero_schedule(m.graph, 1, DType::f32);
  EXPECT_EQ(m.graph.table.size(), tensors);
  std::vector<int> finals(static_cast<size_t>(spec.n_layer) + 2, 0);
  for (const Op& op : m.graph.ops) EXPECT_EQ(op.window.first_param, -1) << op.name;
  for (const BlockWindow& w : s.windows) {
    EXPECT_EQ(w.weights, -1);
    EXPECT_EQ(w.grads, -1);
    if (w.last_grads_of_block) ++finals.at(static_cast<size_t>(w.block));
  }
  EXPECT_EQ(finals, std::vector<int>(finals.size(), 1));
  EXPECT_EQ(s.windows.back().block, 0);  // the embedding's backward ends the step
  EXPECT_TRUE(s.windows.back().last_grads_of_block);
}

// The update in the backward at ZeRO-3: the windows gather weights as stage 3's do but sum no gradients; the
// ops that write a block's gradients name its gradient tensor beside the window's gathered weights, and no
// later window of the step reads a block's weights after its gradients are complete (its update writes them).
TEST(ZeroSchedule, BlockGradientsKeepStageThreesGatheredWeights) {
  ModelSpec spec = testing::small_gpt2_spec(3);
  ModelGraph m = build_gpt2_graph(spec, {.batch = 2, .seq_len = 16});
  const ZeroSchedule s = add_zero_schedule(m.graph, 3, DType::f32, /*window_grads=*/false);
  const BackwardUpdates updates = add_block_gradients(m.graph, s, DType::f32, 0);
  ASSERT_EQ(updates.blocks.size(), static_cast<size_t>(spec.n_layer) + 2);
  std::vector<int> grads_of_block(updates.blocks.size(), -1), done_after(updates.blocks.size(), -1);
  for (const BlockGradients& b : updates.blocks) {
    grads_of_block.at(static_cast<size_t>(b.block)) = b.tensor;
    done_after.at(static_cast<size_t>(b.block)) = b.last_op;
  }
  for (const BlockWindow& window : s.windows) {
    EXPECT_GE(window.weights, 0);
    EXPECT_EQ(window.grads, -1);
    EXPECT_LE(window.last_op, done_after.at(static_cast<size_t>(window.block))) << window.block;
  }
  const TensorTable& t = m.graph.table;
  for (int i = 0; i < static_cast<int>(m.graph.ops.size()); ++i) {
    const Op& op = m.graph.ops[i];
    const int w = s.window_of_op[i];
    if (w < 0) continue;
    const BlockWindow& window = s.windows[w];
    EXPECT_EQ(op.window.weights, window.weights) << op.name;
    EXPECT_EQ(op.window.first_param, window.params.front()) << op.name;
    const bool backward = op.name.ends_with(".backward") || i == m.graph.loss_op;
    EXPECT_EQ(op.window.grads, backward ? grads_of_block.at(static_cast<size_t>(window.block)) : -1)
        << op.name;
    if (op.window.grads >= 0) {
      EXPECT_EQ(t[op.window.grads].category, Category::grads) << op.name;
    }
  }
  // A schedule whose windows sum gradients already holds them: no block tensors on top.
  ModelGraph summed = build_gpt2_graph(spec, {.batch = 2, .seq_len = 16});
  const ZeroSchedule stage2 = add_zero_schedule(summed.graph, 2, DType::f32);
  EXPECT_THROW(add_block_gradients(summed.graph, stage2, DType::f32, 0), std::logic_error);
}

// Per-rank model-state bytes for bf16 with fp32 master and Adam over N = 2 ranks (Megatron's and ZeRO's
// counts: 18, 6 + 12/N, 2 + 16/N, 18/N), and the windows' comm arena: at every op it holds every live window
// tensor, and with prefetch at most two blocks of weights are live at once.
TEST(ZeroSchedule, PlanShardsModelStatesPerStage) {
  const ModelSpec spec = resolve_model("gpt2-tiny", 64);
  const ModelStatePolicy bf16{
      .weights = DType::bf16, .grads = DType::f32, .moments = DType::f32, .master_weights = true};
  const double expected[] = {18, 6 + 12.0 / 2, 2 + 16.0 / 2, 18.0 / 2};
  for (int stage = 0; stage <= 3; ++stage) {
    ModelGraph m = build_gpt2_graph(spec, {.batch = 2, .seq_len = 16, .dtype = DType::bf16});
    const ZeroSchedule s = add_zero_schedule(m.graph, stage, DType::f32);
    const Plan plan = make_plan(m.graph.table, testing::kAlignment, bf16,
                                {.dp = 2, .dp_rank = 1, .stage = stage, .bucket_elems = 4096});
    const CategoryBytes& b = plan.bytes;
    const double states = b[Category::params] + b[Category::master] + b[Category::grads] + b[Category::optim];
    // The last shard pads an odd count by one element.
    EXPECT_NEAR(states / static_cast<double>(plan.num_params), expected[stage], 1e-4) << stage;
    const TensorTable& t = m.graph.table;
    for (int op = 0; op < static_cast<int>(m.graph.ops.size()); ++op) {
      int64_t live = 0;
      int live_weights = 0;
      for (const BlockWindow& w : s.windows)
        for (int id : {w.weights, w.grads})
          if (id >= 0 && t[id].first_op <= op && op <= t[id].last_op) {
            live += (t[id].bytes() + testing::kAlignment - 1) / testing::kAlignment * testing::kAlignment;
            live_weights += id == w.weights;
          }
      EXPECT_LE(live, plan.comm.size) << stage << " op " << op;
      EXPECT_LE(live_weights, 2) << stage << " op " << op;
    }
    EXPECT_EQ(plan.comm.size > 0, stage >= 2);
    EXPECT_LE(plan.comm.size, plan.comm.sum_of_tensors);
  }
}

}  // namespace
}  // namespace mt
