// The backend-ops test's harness, after ggml's test-backend-ops: a case is a tiny graph written with
// GraphBuilder; the harness plans it for one backend and one model-state layout, gives every tensor but the
// parameters a buffer of its own with guard bytes on both sides (parameters sit between sentinels in their
// flat buffers), fills the inputs deterministically and poisons with NaN what the ops only write, runs the
// ops and reads every tensor back through the device. The same case run on a reference backend (the CPU at
// its generic level) and on the backend under test must agree: a second backend (CUDA) plugs in as one more
// BackendUnderTest and runs the same cases "against the CPU".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu_isa.h"
#include "exec/backend.h"
#include "memory/allocation.h"
#include "memory/device_traits.h"
#include "model/graph_builder.h"
#include "model/spec.h"

namespace mt::backend_ops {

struct OpCase;

// A backend the cases run on. Each run plans its own graph from the backend's traits (the CPU's matmul and
// attention scratch differ by level), so nothing of one backend's plan leaks into another's run.
struct BackendUnderTest {
  std::string name;
  // Its traits for a step's storage dtype, sequence length and head size.
  std::function<DeviceTraits(DType dtype, int64_t seq_len, int64_t head_dim)> traits;
  std::function<std::unique_ptr<Backend>(const ModelStatePolicy& policy)> make;
  // Runs `body` with the backend's kernels active (the CPU: at its level, restored afterwards).
  std::function<void(const std::function<void()>& body)> scope;
  // Why it cannot run on this machine (a GPU backend without a GPU): its tests are skipped, saying so.
  std::string unavailable = {};
  // Whether it runs the case at all: what the backend does not implement yet is refused by the flags' checks
  // before a run is planned for it, so its cases are left out, by name in the test's output.
  std::function<bool(const OpCase& c)> runs = [](const OpCase&) { return true; };
  // The collectives' cases run between ranks through the executor, over host memory.
  bool runs_collectives = true;
};

// GoogleTest shows a test's backend by its name (not its bytes, which hold pointers).
inline void PrintTo(const BackendUnderTest& backend, std::ostream* out) {
  *out << backend.name;
}

// The CPU backend with its kernels at `level` and OpenMP's current thread count.
BackendUnderTest cpu_backend_at(CpuIsa level);

// The GPU's backend (tests/cuda/backend_ops_cuda.cpp), unavailable where no GPU is found.
BackendUnderTest cuda_backend_under_test();

// The backends the cases run against the reference: the CPU at this process's level in the unit tests; the
// GPU's in tests/cuda/'s binary (built with MEMTRAIN_BACKEND_OPS_CUDA).
std::vector<BackendUnderTest> backends_under_test();

// A model-state layout: weights and activations in `weights`, parameter gradients in `grads`.
struct Layout {
  DType weights = DType::f32;
  DType grads = DType::f32;
  std::string name() const;
};

// Every layout the precision policies produce, each of which the CPU backend has kernels for.
std::vector<Layout> cpu_layouts();

// What a case's build sees: the builder (for the case's StepConfig, with the layout's dtype and the backend's
// traits), the graph it writes into (to adjust an op the builder emitted) and the model's sizes.
struct CaseBuilder {
  GraphBuilder& g;
  ModelGraph& model;
  const ModelSpec& spec;
};

struct OpCase {
  std::string name;
  ModelSpec spec;
  StepConfig step;  // its shape, tensor-parallel rank, LoRA and quantization; dtype and device come per run
  std::function<void(CaseBuilder&)> build;
  bool training = true;
};

// The case's graph for a layout and a device: sentinel parameters before and after the case's own, and no
// lifetimes, so that every tensor but a parameter gets a buffer of its own (and so guard bytes of its own).
ModelGraph build_case(const OpCase& c, const Layout& layout, const DeviceTraits& traits);

// What an op does to each of its operands: the contract every backend's kernel keeps, and what the harness
// fills and checks. A parameter's gradient is an operand of its own (`grad`): backward ops accumulate into
// it.
enum class Role {
  read,     // only read: must be left as it was
  write,    // written before it is read: poisoned with NaN, every element written
  update,   // read, then written (accumulated, in place)
  scratch,  // the kernel's workspace: what it holds before and after is the kernel's own
};
struct Operand {
  int id = -1;
  Role role = Role::read;
  bool grad = false;
};
// Calls f for every operand the op names (in training, or evaluation where the op does less); a new kind of
// op does not compile until it has its roles here.
void for_each_operand_role(const Op& op, bool training, const std::function<void(const Operand&)>& f);

// A tensor's elements as doubles; exact ones (integers, quantized bytes) must agree bit for bit.
struct TensorValues {
  std::vector<double> values;
  bool exact = false;
};
using TensorMap = std::map<std::string, TensorValues>;

// One run of a case: every tensor but scratch by name (a parameter's gradient as "grad(name)") before and
// after the ops ran, and what went wrong (guard bytes overwritten, NaN left in an output, an input changed,
// an exception).
struct CaseRun {
  TensorMap before, after;
  std::vector<std::string> problems;
};

// What a runner has: the case, its graph and memory, the backend (guarded), and the OpRun its ops get.
struct CaseContext {
  const OpCase& c;
  const ModelGraph& model;
  Allocation& memory;
  Backend& backend;
  const OpRun& run;
};
// Runs the case's ops; returns results that are not tensors (the LM head's logits), by name.
using CaseRunner = std::function<TensorMap(const CaseContext& context)>;

// The default runner: begin_pass, then every op through Backend::run, then the logits of each LM head of an
// unsplit vocabulary through Backend::logits.
TensorMap run_through_backend(const CaseContext& context);

CaseRun run_case(const OpCase& c, const Layout& layout, const BackendUnderTest& backend,
                 const CaseRunner& runner = run_through_backend);

// The cases of the four collective kinds (backend_ops_collectives_test.cpp), which run through an Executor.
std::vector<OpCase> collective_cases();

// The tensors of `run` that differ from `reference` by more than the layout's tolerance, one line each; empty
// when all agree.
std::vector<std::string> compare(const CaseRun& run, const CaseRun& reference, const Layout& layout);

// A Backend that hands every call to another: the base of the harness's guarded backend, and of the faulty
// backends the harness's own tests run to see it catch their faults.
class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend& inner) : inner_(inner) {}
  explicit ForwardingBackend(std::unique_ptr<Backend> owned) : owned_(std::move(owned)), inner_(*owned_) {}

  DeviceDescription description() const override { return inner_.description(); }
  std::optional<DeviceMemoryInfo> memory_info() override { return inner_.memory_info(); }
  DeviceAllocator& allocator(MemorySpace space) override { return inner_.allocator(space); }
  void zero(void* dst, int64_t bytes) override { inner_.zero(dst, bytes); }
  void copy(void* dst, const void* src, int64_t bytes) override { inner_.copy(dst, src, bytes); }
  void copy_from_host(void* dst, const void* host, int64_t bytes) override {
    inner_.copy_from_host(dst, host, bytes);
  }
  void copy_to_host(void* host, const void* src, int64_t bytes) override {
    inner_.copy_to_host(host, src, bytes);
  }
  void read(const void* src, int64_t bytes, const HostReader& read) override {
    inner_.read(src, bytes, read);
  }
  void write(void* dst, int64_t bytes, const HostWriter& write) override { inner_.write(dst, bytes, write); }
  void convert(void* dst, DType to, const void* src, DType from, int64_t n) override {
    inner_.convert(dst, to, src, from, n);
  }
  double sum_of_squares(const void* x, DType dtype, int64_t n) override {
    return inner_.sum_of_squares(x, dtype, n);
  }
  void adamw_update(const AdamWOperands& params, void* m, void* v, DType moments, const AdamWStep& step,
                    const AdamWRounding& rounding) override {
    inner_.adamw_update(params, m, v, moments, step, rounding);
  }
  void adam_mini_second_moments(const void* grads, DType grads_dtype, float* v, const MiniBlockLayout& blocks,
                                const AdamWStep& step) override {
    inner_.adam_mini_second_moments(grads, grads_dtype, v, blocks, step);
  }
  void adam_mini_block_squares(const void* grads, DType grads_dtype, const MiniBlockLayout& blocks,
                               int64_t first, int64_t n, float grad_multiplier, double* sums) override {
    inner_.adam_mini_block_squares(grads, grads_dtype, blocks, first, n, grad_multiplier, sums);
  }
  void adam_mini_second_moments_from_sums(float* v, const double* sums, const MiniBlockLayout& blocks,
                                          const AdamWStep& step) override {
    inner_.adam_mini_second_moments_from_sums(v, sums, blocks, step);
  }
  void adam_mini_update(const AdamWOperands& params, void* m, DType moments, const float* v,
                        const MiniBlockLayout& blocks, int64_t first, const AdamWStep& step,
                        const AdamWRounding& rounding) override {
    inner_.adam_mini_update(params, m, moments, v, blocks, first, step, rounding);
  }
  void adam_mini_update_blocked(const AdamWOperands& params, MomentFormat format, uint8_t* m, float* m_scales,
                                std::span<const MiniTensor> tensors, const AdamWStep& step,
                                const AdamWRounding& rounding) override {
    inner_.adam_mini_update_blocked(params, format, m, m_scales, tensors, step, rounding);
  }
  void adamw_update_blocked(const AdamWOperands& params, const QuantizedMoments& moments,
                            const AdamWStep& step, std::span<const DecayRun> runs,
                            const AdamWRounding& rounding) override {
    inner_.adamw_update_blocked(params, moments, step, runs, rounding);
  }
  void quantize_weight(const float* host_values, const QuantizedWeight& into) override {
    inner_.quantize_weight(host_values, into);
  }
  void begin_pass(const Graph& graph) override { inner_.begin_pass(graph); }
  void run(const Op& op, const OpRun& run) override { inner_.run(op, run); }
  void logits(const Op& head, const OpRun& run, float* host_out) override {
    inner_.logits(head, run, host_out);
  }

 private:
  std::unique_ptr<Backend> owned_;

 protected:
  Backend& inner_;
};

// n elements of `dtype` (f32, bf16, f16, f64, i32, u8) at `data` in the device's memory, read through the
// device and widened on the host; and written back, rounded to the dtype on the host.
std::vector<double> read_values(Device& device, const void* data, DType dtype, int64_t n);
void write_values(Device& device, void* data, DType dtype, const std::vector<double>& values);

// The step's gradient multiplier and micro-batch number every case runs with (neither 1 nor 0, so that a
// backend ignoring them differs).
constexpr float kGradScale = 0.75f;
constexpr uint64_t kDraw = 3;

}  // namespace mt::backend_ops
