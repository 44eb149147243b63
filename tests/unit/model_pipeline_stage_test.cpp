// A pipeline stage's graph under 1F1B: evaluation runs its ops up to Graph::forward_end, so the exchange that
// ends the first forward receives nothing of a backward (which evaluation never sends); in the steady state a
// send and the receive after it share one exchange, so that neighbouring stages never both wait to send.
#include <gtest/gtest.h>

#include "model/model.h"
#include "model_test_util.h"

namespace mt {
namespace {

Graph stage_graph(int pp, int stage, int64_t micro_batches) {
  const ModelSpec spec = testing::small_gpt2_spec(4);
  return build_model_graph(
             spec, {.batch = 1, .seq_len = 16, .pp = pp, .pp_rank = stage, .micro_batches = micro_batches})
      .graph;
}

int merged_exchanges(const Graph& g) {
  int merged = 0;
  for (const Op& op : g.ops)
    if (op.kind() == OpKind::pipe_exchange && op.as<ops::PipeExchange>().send >= 0 &&
        op.as<ops::PipeExchange>().recv >= 0)
      ++merged;
  return merged;
}

TEST(PipelineStage, TheFirstForwardEndsWithoutWaitingForABackward) {
  for (int64_t micro_batches : {1, 2, 4})
    for (int stage : {0, 1}) {
      const Graph g = stage_graph(3, stage, micro_batches);
      const Op& last = g.ops[static_cast<size_t>(g.forward_end - 1)];
      ASSERT_EQ(last.kind(), OpKind::pipe_exchange) << last.name;
      EXPECT_GE(last.as<ops::PipeExchange>().send, 0) << last.name;
      EXPECT_LT(last.as<ops::PipeExchange>().recv, 0)
          << "micro-batches " << micro_batches << " stage " << stage;
    }
}

TEST(PipelineStage, SteadyStateSendsAndReceivesInOneExchange) {
  // Stage 1 of 3 over 4 micro-batches: F0, then F1 B0 F2 B1 F3 B2, then B3. Each send to a stage that the
  // next pass receives from is one exchange with that receive: 5 of them (B2 sends back, B3 receives from
  // ahead).
  EXPECT_EQ(merged_exchanges(stage_graph(3, 1, 4)), 5);
  EXPECT_EQ(merged_exchanges(stage_graph(3, 1, 1)), 0);
}

// The graph records its passes in the order the schedule runs them; without pipelines, the forward up to the
// loss and the backward after it.
TEST(PipelineStage, PassesFollowTheSchedule) {
  const Graph g = stage_graph(3, 1, 4);
  const std::vector<PipelinePass> schedule = one_f_one_b(3, 1, 4);
  ASSERT_EQ(g.passes.size(), schedule.size());
  for (size_t i = 0; i < schedule.size(); ++i) {
    EXPECT_EQ(g.passes[i].pass.forward, schedule[i].forward);
    EXPECT_EQ(g.passes[i].pass.micro_batch, schedule[i].micro_batch);
    EXPECT_EQ(&pass_of(g, g.passes[i].first_op), &g.passes[i]);
  }
  EXPECT_EQ(g.passes[1].first_op, g.forward_end);
  const Graph whole = stage_graph(1, 0, 1);
  ASSERT_EQ(whole.passes.size(), 2u);
  EXPECT_TRUE(pass_of(whole, whole.loss_op).pass.forward);
  EXPECT_FALSE(pass_of(whole, whole.loss_op + 1).pass.forward);
}

}  // namespace
}  // namespace mt
