// The backend-ops harness catches what it is there to catch: faulty backends (the CPU's, with one fault
// added around its kernel) run a case, and the harness must report each fault, and nothing for the CPU
// itself.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "backend_ops.h"
#include "devices/devices.h"

namespace mt::backend_ops {
namespace {

// Runs each op through `fault`, which gets the real backend to run it with (or not).
using Fault = std::function<void(Backend& real, const Op& op, const OpRun& run)>;

class FaultyBackend final : public ForwardingBackend {
 public:
  FaultyBackend(std::unique_ptr<Backend> real, Fault fault)
      : ForwardingBackend(std::move(real)), fault_(std::move(fault)) {}
  void run(const Op& op, const OpRun& run) override { fault_(inner_, op, run); }

 private:
  Fault fault_;
};

BackendUnderTest faulty(Fault fault) {
  BackendUnderTest backend = cpu_backend_at(process_cpu_isa());
  backend.name = "faulty";
  backend.make = [make = backend.make, fault](const ModelStatePolicy& policy) -> std::unique_ptr<Backend> {
    return std::make_unique<FaultyBackend>(make(policy), fault);
  };
  return backend;
}

const ModelSpec kHarnessSpec{.name = "backend-ops",
                             .n_layer = 1,
                             .n_head = 1,
                             .n_kv_head = 1,
                             .n_embd = 21,
                             .intermediate_size = 84,
                             .n_positions = 8,
                             .vocab_size = 45,
                             .padded_vocab_size = 48};

// GELU forward and its backward into a tensor of its own; LayerNorm's, with weight gradients.
OpCase harness_gelu_case() {
  return {"gelu", kHarnessSpec, {.batch = 2, .seq_len = 5}, [](CaseBuilder& b) {
            const int x = b.g.act("x", 21), dy = b.g.act("h.grad", 21);
            b.g.activation(Activation::gelu, "gelu", "", x, 21);
            b.g.activation_backward(Activation::gelu, "gelu.backward", x, b.g.act("x.grad", 21), dy);
          }};
}

OpCase layernorm_case() {
  return {"layernorm", kHarnessSpec, {.batch = 2, .seq_len = 5}, [](CaseBuilder& b) {
            const NormParams p{.weight = b.g.param("ln.weight", {21}), .bias = b.g.param("ln.bias", {21})};
            const int x = b.g.act("x", 21);
            const NormActs acts = b.g.norm(NormKind::layernorm, "ln", "", x, p, 21);
            b.g.norm_backward(NormKind::layernorm, "ln.backward", x, p, acts, b.g.act("x.grad", 21),
                              b.g.act("ln.out.grad", 21));
          }};
}

// Writes two bytes of `value` at `at` (a 16-bit element, or half an fp32 one).
void poke(Backend& backend, void* at, uint16_t value = 0x3c00) {
  backend.copy_from_host(at, &value, sizeof value);
}

const Layout kFp32{};

bool any_problem_has(const CaseRun& run, const std::string& words) {
  for (const std::string& p : run.problems)
    if (p.find(words) != std::string::npos) return true;
  return false;
}

std::string problems_of(const CaseRun& run) {
  std::string all;
  for (const std::string& p : run.problems) all += "\n  " + p;
  return all;
}

TEST(BackendOpsHarness, TheCpuHasNoProblems) {
  const CaseRun run = run_case(layernorm_case(), kFp32, cpu_backend_at(process_cpu_isa()));
  EXPECT_TRUE(run.problems.empty()) << problems_of(run);
}

TEST(BackendOpsHarness, CatchesAWritePastAnOutput) {
  const CaseRun run =
      run_case(harness_gelu_case(), kFp32, faulty([](Backend& real, const Op& op, const OpRun& r) {
                 real.run(op, r);
                 if (op.kind() != OpKind::gelu) return;
                 const int out = op.as<ops::Gelu>().out;
                 poke(real, static_cast<char*>(r.memory.data(out)) + r.graph.table[out].bytes());
               }));
  EXPECT_TRUE(any_problem_has(run, "guard bytes after gelu.out overwritten")) << problems_of(run);
  EXPECT_TRUE(any_problem_has(run, "after op gelu")) << problems_of(run);
}

TEST(BackendOpsHarness, CatchesAWriteBeforeAnOutput) {
  const CaseRun run =
      run_case(harness_gelu_case(), kFp32, faulty([](Backend& real, const Op& op, const OpRun& r) {
                 real.run(op, r);
                 if (op.kind() == OpKind::gelu_backward)
                   poke(real, static_cast<char*>(r.memory.data(op.as<ops::GeluBackward>().dinp)) - 1);
               }));
  EXPECT_TRUE(any_problem_has(run, "guard bytes before x.grad overwritten")) << problems_of(run);
}

TEST(BackendOpsHarness, CatchesAnOpThatWritesNothing) {
  const CaseRun run =
      run_case(harness_gelu_case(), kFp32, faulty([](Backend& real, const Op& op, const OpRun& r) {
                 if (op.kind() != OpKind::gelu_backward) real.run(op, r);
               }));
  EXPECT_TRUE(any_problem_has(run, "x.grad: element 0 is nan")) << problems_of(run);
}

TEST(BackendOpsHarness, CatchesAWriteIntoAnInput) {
  const CaseRun run =
      run_case(harness_gelu_case(), kFp32, faulty([](Backend& real, const Op& op, const OpRun& r) {
                 real.run(op, r);
                 if (op.kind() == OpKind::gelu) poke(real, r.memory.data(op.as<ops::Gelu>().inp));
               }));
  EXPECT_TRUE(any_problem_has(run, "x, which no op writes, changed at element 0")) << problems_of(run);
}

// A weight gradient written one element too far lands in the parameter after it: the sentinel.
TEST(BackendOpsHarness, CatchesAGradientWrittenPastItsParameter) {
  const CaseRun run =
      run_case(layernorm_case(), kFp32, faulty([](Backend& real, const Op& op, const OpRun& r) {
                 real.run(op, r);
                 if (op.kind() != OpKind::layernorm_backward) return;
                 const int bias = op.as<ops::LayerNormBackward>().bias;
                 poke(real, r.memory.grad<float>(bias) + r.graph.table[bias].numel());
               }));
  EXPECT_TRUE(any_problem_has(run, "grad(sentinel.after), which no op writes, changed")) << problems_of(run);
}

// A value off by a little more than the tolerance, in one element, is a mismatch with the reference.
TEST(BackendOpsHarness, CatchesOneWrongValue) {
  const BackendUnderTest cpu = cpu_backend_at(process_cpu_isa());
  const CaseRun want = run_case(layernorm_case(), kFp32, cpu);
  const CaseRun got =
      run_case(layernorm_case(), kFp32, faulty([](Backend& real, const Op& op, const OpRun& r) {
                 real.run(op, r);
                 if (op.kind() != OpKind::layernorm) return;
                 float* out = r.memory.f32(op.as<ops::LayerNorm>().out) + 7;
                 const float wrong = *out * 1.0001f + 1e-4f;
                 real.copy_from_host(out, &wrong, sizeof wrong);
               }));
  EXPECT_TRUE(got.problems.empty()) << problems_of(got);
  const std::vector<std::string> mismatches = compare(got, want, kFp32);
  ASSERT_EQ(mismatches.size(), 1u);
  EXPECT_NE(mismatches[0].find("ln.out: 1 of 210 elements differ; worst at 7"), std::string::npos)
      << mismatches[0];
}

}  // namespace
}  // namespace mt::backend_ops
