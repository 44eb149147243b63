// The four collective kinds, which the Executor runs through its Communicator rather than Backend::run: each
// case runs through an Executor on the backend under test (guarded, poisoned, in every layout as the other
// cases), with a fake 2-rank group whose peer holds the same data as this rank, so the expected results are
// known on the host: an all-reduce doubles, an all-gather repeats the shard, a reduce-scatter gives twice
// this rank's rows, and a pipeline exchange receives what it sent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <stdexcept>

#include "backend_ops.h"
#include "exec/executor.h"

namespace mt::backend_ops {

namespace {

// The peer is this rank's mirror: every collective reads and writes through the device, as a real group's
// transport would.
class MirrorPeer final : public Communicator {
 public:
  MirrorPeer(Device& device, int rank) : device_(device), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  std::string backend() const override { return "mirror"; }
  void all_reduce_sum(void* data, int64_t count, DType dtype) override { twice(data, data, count, dtype); }
  void reduce_scatter_sum(const void* send, void* recv, int64_t count, DType dtype) override {
    twice(static_cast<const char*>(send) + rank_ * count * element(dtype), recv, count, dtype);
  }
  void reduce_sum(const void* send, void* recv, int64_t count, DType dtype, int root) override {
    if (root == rank_) twice(send, recv, count, dtype);
  }
  void all_gather(const void* send, void* recv, int64_t count, DType dtype) override {
    const std::vector<double> shard = read_values(device_, send, dtype, count);
    for (int r = 0; r < size(); ++r)
      write_values(device_, static_cast<char*>(recv) + r * count * element(dtype), dtype, shard);
  }
  void broadcast(void*, int64_t, DType, int) override {}  // the peer holds the same data
  void send_recv(const void* send, int64_t send_count, void* recv, int64_t recv_count, DType dtype,
                 int peer) override {
    if (peer == rank_) throw std::invalid_argument("mirror peer: send_recv with itself");
    if (send) sent_ = read_values(device_, send, dtype, send_count);
    if (!recv) return;
    if (static_cast<int64_t>(sent_.size()) != recv_count)
      throw std::logic_error("mirror peer: receives " + std::to_string(recv_count) + " elements, " +
                             std::to_string(sent_.size()) + " were sent");
    write_values(device_, recv, dtype, sent_);
  }
  void barrier() override {}
  int64_t buffer_bytes() const override { return 0; }

 protected:
  std::unique_ptr<Communicator> split_into_group(int, int) override {
    throw std::logic_error("mirror peer: not split");
  }

 private:
  static int64_t element(DType dtype) { return static_cast<int64_t>(dtype_size(dtype)); }
  // The sum of this rank's and the peer's (the same) values, in fp32 and rounded once, as the contract says.
  void twice(const void* from, void* to, int64_t count, DType dtype) {
    std::vector<double> x = read_values(device_, from, dtype, count);
    for (double& v : x) v = static_cast<float>(v) + static_cast<float>(v);
    write_values(device_, to, dtype, x);
  }

  Device& device_;
  int rank_;
  std::vector<double> sent_;  // the echo of the last send, for the next receive
};

TensorMap run_through_executor(const CaseContext& context) {
  const Graph& graph = context.model.graph;
  MirrorPeer tensor_group(context.backend, context.c.step.tp_rank),
      pipeline(context.backend, context.c.step.pp_rank);
  Executor exec(context.c.spec, graph, context.memory, context.backend);
  if (graph.tp > 1) exec.set_tensor_group(&tensor_group);
  if (graph.pp > 1) exec.set_pipeline(&pipeline);
  exec.train_step(kGradScale, kDraw, context.run.loss_targets);
  return {};
}

// A case and the values its collective leaves in the tensors it writes, from those before the run.
struct CollectiveCase {
  OpCase op;
  std::function<TensorMap(const TensorMap& before)> expect;
};

const ModelSpec kSpec{.name = "backend-ops",
                      .n_layer = 1,
                      .n_head = 1,
                      .n_kv_head = 1,
                      .n_embd = 13,
                      .intermediate_size = 52,
                      .n_positions = 8,
                      .vocab_size = 45,
                      .padded_vocab_size = 48};
constexpr int64_t kC = 13;

// Sequence parallel over two ranks: this rank (1) holds rows [5, 10) of the [10, C] residual stream.
const StepConfig kTp2{.batch = 2, .seq_len = 5, .tp = 2, .tp_rank = 1, .sequence_parallel = true};

TensorValues scaled(const TensorValues& x, double factor, size_t first = 0, size_t n = SIZE_MAX) {
  n = std::min(n, x.values.size() - first);
  TensorValues out{{x.values.begin() + first, x.values.begin() + first + n}, x.exact};
  for (double& v : out.values) v *= factor;
  return out;
}

std::vector<CollectiveCase> collective_table() {
  std::vector<CollectiveCase> cases;
  cases.push_back({{"all-reduce",
                    kSpec,
                    {.batch = 2, .seq_len = 5, .tp = 2, .tp_rank = 1},
                    [](CaseBuilder& b) { b.g.all_reduce("x", b.g.act("x", kC)); }},
                   [](const TensorMap& before) {
                     return TensorMap{{"x", scaled(before.at("x"), 2)}};
                   }});
  cases.push_back({{"all-gather", kSpec, kTp2,
                    [](CaseBuilder& b) { b.g.gathered("x", b.g.residual_act("x.shard", kC)); }},
                   [](const TensorMap& before) {
                     TensorValues whole = before.at("x.shard");
                     whole.values.insert(whole.values.end(), whole.values.begin(), whole.values.end());
                     return TensorMap{{"x", whole}};
                   }});
  cases.push_back(
      {{"reduce-scatter", kSpec, kTp2,
        [](CaseBuilder& b) { b.g.sum_partials("y", b.g.act("y.partial", kC), b.g.residual_act("y", kC)); }},
       [](const TensorMap& before) {
         const size_t rows = 5 * kC;
         return TensorMap{{"y", scaled(before.at("y.partial"), 2, rows, rows)}};
       }});
  // A send on its own, a receive on its own (what the send left), and 1F1B's send and receive at once.
  cases.push_back({{"pipeline exchanges",
                    kSpec,
                    {.batch = 2, .seq_len = 5, .pp = 2},
                    [](CaseBuilder& b) {
                      GraphBuilder& g = b.g;
                      const int a = g.act("a", kC), c = g.act("c", kC);
                      g.op("a.send", ops::PipeExchange{.send = a, .next = true});
                      g.op("b.recv", ops::PipeExchange{.recv = g.act("b", kC), .next = true});
                      g.op("c.send_d.recv",
                           ops::PipeExchange{.send = c, .recv = g.act("d", kC), .next = true});
                    }},
                   [](const TensorMap& before) {
                     return TensorMap{{"b", before.at("a")}, {"d", before.at("c")}};
                   }});
  return cases;
}

class Collectives : public ::testing::TestWithParam<BackendUnderTest> {
 protected:
  void SetUp() override {
    if (!GetParam().unavailable.empty()) GTEST_SKIP() << GetParam().name << ": " << GetParam().unavailable;
    if (!GetParam().runs_collectives)
      GTEST_SKIP() << GetParam().name << " runs in one process: no collective";
  }
};

TEST_P(Collectives, RunByTheExecutorAsTheirPeerWould) {
  const BackendUnderTest& backend = GetParam();
  for (const CollectiveCase& c : collective_table()) {
    for (const Layout& layout : cpu_layouts()) {
      SCOPED_TRACE(c.op.name + " | " + layout.name());
      const CaseRun run = run_case(c.op, layout, backend, run_through_executor);
      for (const std::string& p : run.problems) ADD_FAILURE() << p;
      if (!run.problems.empty()) continue;
      for (const auto& [name, want] : c.expect(run.before))
        EXPECT_EQ(run.after.at(name).values, want.values) << name;
    }
  }
}

// The collectives are the executor's: a backend handed one refuses it rather than running something.
TEST_P(Collectives, BackendRunRefusesThem) {
  const BackendUnderTest& backend = GetParam();
  backend.scope([&] {
    for (const CollectiveCase& c : collective_table()) {
      const Layout fp32{};
      const DeviceTraits traits = backend.traits(fp32.weights, c.op.step.seq_len, c.op.spec.head_dim());
      const ModelGraph model = build_case(c.op, fp32, traits);
      const Plan plan = make_plan(model.graph.table, traits.alignment, {});
      const std::unique_ptr<Backend> cpu = backend.make(plan.policy);
      const Allocation memory(model.graph.table, plan, *cpu);
      const OpRun run{c.op.spec, model.graph, memory, true, kGradScale};
      for (const Op& op : model.graph.ops) {
        EXPECT_TRUE(is_collective(op.kind())) << op.name;
        EXPECT_THROW(cpu->run(op, run), std::logic_error) << op.name;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(BackendOps, Collectives, ::testing::ValuesIn(backends_under_test()),
                         [](const auto& info) { return info.param.name; });

}  // namespace

std::vector<OpCase> collective_cases() {
  std::vector<OpCase> cases;
  for (CollectiveCase& c : collective_table()) cases.push_back(std::move(c.op));
  return cases;
}

}  // namespace mt::backend_ops
