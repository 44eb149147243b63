#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "backend/cpu/cpu_device.h"
#include "exec/executor.h"
#include "memory/allocation.h"
#include "memory/arena.h"
#include "memory/plan.h"
#include "model/gpt2.h"
#include "model_test_util.h"
#include "tests/device_test_util.h"

namespace mt {
namespace {

int add_live(TensorTable& t, const std::string& name, int64_t floats, int first, int last) {
  return t.add({name, {floats}, DType::f32, Category::activations, first, last});
}

TEST(MemoryPlan, DisjointLifetimesShareMemoryOverlappingOnesDoNot) {
  TensorTable t;
  const int a = add_live(t, "a", 256, 0, 1);
  const int b = add_live(t, "b", 256, 2, 3);  // after a: may reuse a's bytes
  const int c = add_live(t, "c", 128, 1, 2);  // overlaps both
  const ArenaLayout layout = pack_arena(t, Category::activations, testing::kAlignment);
  EXPECT_EQ(layout.offset[a], layout.offset[b]);
  EXPECT_EQ(layout.sum_of_tensors, (256 + 256 + 128) * 4);
  EXPECT_EQ(layout.size, (256 + 128) * 4);
  const int64_t c_begin = layout.offset[c], c_end = c_begin + 128 * 4;
  EXPECT_TRUE(c_end <= layout.offset[a] || c_begin >= layout.offset[a] + 256 * 4);
}

TEST(MemoryPlan, OffsetsAreAligned) {
  TensorTable t;
  add_live(t, "odd", 3, 0, 1);
  const int second = add_live(t, "second", 5, 0, 1);
  const ArenaLayout layout = pack_arena(t, Category::activations, testing::kAlignment);
  EXPECT_EQ(layout.offset[second] % testing::kAlignment, 0);
  EXPECT_EQ(layout.size, 2 * testing::kAlignment);
}

TEST(MemoryPlan, Fp32ModelStatesAreSixteenBytesPerParameter) {
  TensorTable t;
  t.add({"w", {10, 7}, DType::f32, Category::params});
  t.add({"b", {7}, DType::f32, Category::params});
  t.add({"tokens", {3, 5}, DType::i32, Category::other});
  const Plan plan = make_plan(t, testing::kAlignment, ModelStatePolicy{});
  EXPECT_EQ(plan.num_params, 77);
  EXPECT_EQ(plan.bytes[Category::params] + plan.bytes[Category::grads] + plan.bytes[Category::optim],
            16 * 77);
  EXPECT_EQ(plan.bytes[Category::master], 0);
  EXPECT_EQ(plan.bytes[Category::other], 15 * 4);
  EXPECT_EQ(plan.param_offset[1], 70);
}

TEST(MemoryArena, AccessOutsideLifetimeIsAnError) {
  TensorTable t;
  const int a = add_live(t, "a", 16, 1, 2);
  const ArenaLayout layout = pack_arena(t, Category::activations, testing::kAlignment);
  Arena arena(t, layout, Category::activations, cpu_allocator(), testing::kAlignment);
  EXPECT_THROW(arena.data(a), std::logic_error);
  arena.begin_op(1);
  EXPECT_NO_THROW(arena.data(a));
  arena.end_op(2);
  EXPECT_THROW(arena.data(a), std::logic_error);
  EXPECT_EQ(arena.high_water(), 64);
}

TEST(MemoryArena, OverlappingLiveTensorsAreDetected) {
  TensorTable t;
  add_live(t, "a", 16, 0, 1);
  add_live(t, "b", 16, 1, 2);
  ArenaLayout wrong = pack_arena(t, Category::activations, testing::kAlignment);
  wrong.offset[1] = wrong.offset[0];  // a layout that ignores the overlap of [0,1] and [1,2]
  Arena arena(t, wrong, Category::activations, cpu_allocator(), testing::kAlignment);
  arena.begin_op(0);
  EXPECT_THROW(arena.begin_op(1), std::logic_error);
}

// Among many bound tensors: one that straddles two of them, and an empty one inside another (at the start of
// one it overlaps nothing).
TEST(MemoryArena, OverlapsAmongManyLiveTensorsAreDetected) {
  TensorTable t;
  for (int i = 0; i < 50; ++i) add_live(t, "held", 16, 0, 9);
  const int straddling = add_live(t, "straddling", 16, 5, 5);
  const int inside = t.add({"inside", {0}, DType::f32, Category::activations, 6, 6});
  const int at_start = t.add({"at_start", {0}, DType::f32, Category::activations, 7, 7});
  ArenaLayout wrong = pack_arena(t, Category::activations, testing::kAlignment);
  wrong.offset[straddling] = wrong.offset[20] + 32;
  wrong.offset[inside] = wrong.offset[30] + 4;
  wrong.offset[at_start] = wrong.offset[30];
  Arena arena(t, wrong, Category::activations, cpu_allocator(), testing::kAlignment);
  for (int op = 0; op < 5; ++op) arena.begin_op(op);
  EXPECT_THROW(arena.begin_op(5), std::logic_error);
  EXPECT_THROW(arena.begin_op(6), std::logic_error);
  EXPECT_NO_THROW(arena.begin_op(7));
}

TEST(MemoryArena, LiveBytesCountBoundTensorsByAlignedSize) {
  TensorTable t;
  t.add({"a", {10}, DType::f32, Category::activations, 0, 1});  // 40 bytes, 64 aligned
  t.add({"b", {32}, DType::f32, Category::activations, 1, 2});  // 128 bytes
  const ArenaLayout layout = pack_arena(t, Category::activations, testing::kAlignment);
  Arena arena(t, layout, Category::activations, cpu_allocator(), testing::kAlignment);
  EXPECT_EQ(arena.live_bytes(), 0);
  arena.begin_op(0);
  EXPECT_EQ(arena.live_bytes(), 64);
  arena.begin_op(1);
  EXPECT_EQ(arena.live_bytes(), 64 + 128);
  arena.end_op(1);  // a's last op
  EXPECT_EQ(arena.live_bytes(), 128);
  arena.reset();
  EXPECT_EQ(arena.live_bytes(), 0);
}

// GPT-2 activations counted by hand: per layer the block keeps 16 B*T*C floats (ln_1 1, qkv 3, attention out
// 1, residual 1, ln_2 1, fc 4, gelu 4, block out 1), 4 B*T LayerNorm statistics and B*H*T attention row
// statistics; backward adds 10 B*T*C of activation gradients per layer (fc 4, ln_2 1, attention out 1, qkv 3,
// ln_1 1).
TEST(MemoryPlan, Gpt2ActivationsMatchHandCount) {
  ModelSpec spec = testing::small_gpt2_spec(3);
  const int64_t B = 2, T = 32, C = 64, H = 4, L = 3, BT = B * T;
  const ModelGraph m = build_gpt2_graph(spec, {.batch = B, .seq_len = T});
  const Plan plan = make_plan(m.graph.table, testing::kAlignment, ModelStatePolicy{});
  const int64_t per_layer = 16 * BT * C + 4 * BT + B * H * T + 10 * BT * C;
  const int64_t outside =
      BT * C /*embedding*/ + BT * C + 2 * BT /*ln_f*/ + BT * C /*ln_f grad*/ + BT * C /*residual grad*/;
  EXPECT_EQ(plan.activations.sum_of_tensors, 4 * (L * per_layer + outside));

  // At the loss every saved tensor is live: the packed arena can be no smaller, and must beat the plain sum.
  const int64_t live_at_loss =
      4 * (L * (16 * BT * C + 4 * BT + B * H * T) + BT * C + BT * C + 2 * BT + BT * C);
  EXPECT_GE(plan.activations.size, live_at_loss);
  EXPECT_LT(plan.activations.size, plan.activations.sum_of_tensors);
  EXPECT_EQ(plan.num_params, spec.num_parameters());
}

TEST(MemoryPlan, Gpt2PresetHasPublishedParameterCount) {
  EXPECT_EQ(resolve_model("gpt2", 1).num_parameters(), 124439808);
  EXPECT_EQ(resolve_model("gpt2", 64).padded_vocab_size, 50304);
}

TEST(MemoryAllocation, TrainingStepMeasuresExactlyThePlan) {
  const ModelSpec spec = resolve_model("gpt2-tiny", 64);
  ModelGraph m = build_gpt2_graph(spec, testing::on_cpu(spec, {.batch = 2, .seq_len = 16}));
  const Plan plan = make_plan(m.graph.table, testing::kAlignment, ModelStatePolicy{});
  Allocation memory(m.graph.table, plan, testing::cpu_backend(plan.policy));
  init_gpt2_params(spec, m, memory, 7);
  for (int i = 0; i < 32; ++i) {
    memory.i32(m.batch().tokens)[i] = (i * 37) % 256;
    memory.i32(m.batch().targets)[i] = (i * 11) % 256;
  }
  Executor exec(spec, m.graph, memory, testing::cpu_backend(plan.policy));
  const double loss = testing::train_step(exec, m, memory, 1.0f);
  EXPECT_NEAR(loss, std::log(256.0), 0.5);  // near-uniform predictions at initialisation
  EXPECT_EQ(memory.measured().bytes, plan.bytes.bytes);
}

}  // namespace
}  // namespace mt
