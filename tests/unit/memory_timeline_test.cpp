#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "exec/executor.h"
#include "memory/allocation.h"
#include "memory/arena.h"
#include "memory/plan.h"
#include "memory/timeline.h"
#include "model/gpt2.h"
#include "tests/device_test_util.h"

namespace mt {
namespace {

int64_t aligned(int64_t bytes) {
  return (bytes + testing::kAlignment - 1) / testing::kAlignment * testing::kAlignment;
}

MemoryTimeline two_point_timeline() {
  MemoryTimeline t{"tiny | B=1 T=2 | fp32", 1, {}, {}};
  t.planned[Category::params] = 400;
  t.planned[Category::activations] = 192;
  for (int op = 0; op < 2; ++op) {
    TimelinePoint p{op, op == 0 ? "embed" : "lm_head", {}};
    p.live[Category::params] = 400;
    p.live[Category::activations] = 64 * (op + 1);
    p.live[Category::workspace] = op * 1000;
    t.points.push_back(p);
  }
  return t;
}

TEST(MemoryTimeline, JsonRoundTrip) {
  const MemoryTimeline t = two_point_timeline();
  const nlohmann::json json = nlohmann::json::parse(memory_timeline_json(t));
  for (Category c : kAllCategories) EXPECT_TRUE(json["points"][0]["bytes"].contains(category_key(c)));
  const MemoryTimeline back = memory_timeline_from_json(json);
  EXPECT_EQ(back.run, t.run);
  EXPECT_EQ(back.loss_op, 1);
  EXPECT_EQ(back.planned.bytes, t.planned.bytes);
  ASSERT_EQ(back.points.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(back.points[i].op, i);
    EXPECT_EQ(back.points[i].name, t.points[i].name);
    EXPECT_EQ(back.points[i].live.bytes, t.points[i].live.bytes);
  }
  EXPECT_EQ(back.peak_point(), 1);
}

TEST(MemoryTimeline, CsvHasOneRowPerOpWithTotals) {
  std::istringstream csv(memory_timeline_csv(two_point_timeline()));
  std::string header, row0, row1, extra;
  std::getline(csv, header);
  std::getline(csv, row0);
  std::getline(csv, row1);
  EXPECT_EQ(header, "op,name,params,frozen,master,grads,optim,activations,workspace,comm,other,total");
  EXPECT_EQ(row0, "0,embed,400,0,0,0,0,64,0,0,0,464");
  EXPECT_EQ(row1, "1,lm_head,400,0,0,0,0,128,1000,0,0,1528");
  EXPECT_FALSE(std::getline(csv, extra));
}

TEST(MemoryTimeline, MissingOrMalformedFileIsADataErrorNamingIt) {
  const std::string dir = ::testing::TempDir() + "memtrain-timeline-test";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/memory_timeline.json";
  std::filesystem::remove(path);
  for (const char* text :
       {static_cast<const char*>(nullptr), "{\"run\": \"x\", \"loss_op\": 1", "{\"run\": 3}"}) {
    if (text) std::ofstream(path) << text;
    try {
      read_memory_timeline(path);
      ADD_FAILURE() << "read " << (text ? text : "a missing file");
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::data);
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  }
}

// A gpt2-tiny step observed op by op: the model states never move, the arenas hold exactly the tensors whose
// lifetimes cover the op, and nothing of the step outlives it.
TEST(MemoryTimeline, TrainingStepFollowsTheLifetimes) {
  const ModelSpec spec = resolve_model("gpt2-tiny", 64);
  ModelGraph m = build_gpt2_graph(spec, testing::on_cpu(spec, {.batch = 2, .seq_len = 16}));
  const TensorTable& table = m.graph.table;
  const Plan plan = make_plan(table, testing::kAlignment, ModelStatePolicy{});
  Allocation memory(table, plan, testing::cpu_backend(plan.policy));
  init_gpt2_params(spec, m, memory, 7);
  Executor exec(spec, m.graph, memory, testing::cpu_backend(plan.policy));
  std::vector<CategoryBytes> live;
  exec.set_op_observer([&](int op) {
    EXPECT_EQ(op, static_cast<int>(live.size()));
    live.push_back(memory.live());
  });
  testing::train_step(exec, m, memory, 1.0f);
  ASSERT_EQ(live.size(), m.graph.ops.size());

  for (Category arena : {Category::activations, Category::workspace}) {
    const ArenaLayout& layout = arena == Category::activations ? plan.activations : plan.workspace;
    int64_t most = 0;
    for (size_t op = 0; op < live.size(); ++op) {
      int64_t expected = 0;
      for (const TensorDesc& t : table.tensors())
        if (t.category == arena && t.has_lifetime() && t.first_op <= static_cast<int>(op) &&
            static_cast<int>(op) <= t.last_op)
          expected += aligned(t.bytes());
      EXPECT_EQ(live[op][arena], expected) << category_key(arena) << " during " << m.graph.ops[op].name;
      most = std::max(most, live[op][arena]);
    }
    // Packing can leave holes but never overlaps live tensors: the largest live set fits in the arena.
    EXPECT_GT(most, 0);
    EXPECT_LE(most, layout.size);
  }
  for (const CategoryBytes& bytes : live)
    for (Category c : {Category::params, Category::master, Category::grads, Category::optim, Category::other})
      EXPECT_EQ(bytes[c], plan.bytes[c]) << category_key(c);

  // After the step only the buffers held for the whole run remain.
  const CategoryBytes after = memory.live();
  EXPECT_EQ(after[Category::activations], 0);
  EXPECT_EQ(after[Category::workspace], 0);
  EXPECT_EQ(after.total(),
            plan.bytes.total() - plan.bytes[Category::activations] - plan.bytes[Category::workspace]);
}

}  // namespace
}  // namespace mt
