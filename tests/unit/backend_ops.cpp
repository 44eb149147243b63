// The backend-ops harness (backend_ops.h): guard bytes, operand roles, fills, runs and comparisons.
#include "backend_ops.h"

#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_isa.h"
#include "backend_ops_guard.h"
#include "core/half.h"
#include "core/rng.h"
#include "devices/devices.h"

namespace mt::backend_ops {

namespace {

constexpr uint64_t kFillSeed = 2027;

ModelStatePolicy policy_of(const Layout& layout) {
  ModelStatePolicy p;
  p.weights = layout.weights;
  p.grads = layout.grads;
  return p;
}

template <typename T>
void widen(const std::vector<char>& bytes, std::vector<double>& out) {
  for (size_t i = 0; i < out.size(); ++i) {
    T x;
    std::memcpy(&x, bytes.data() + i * sizeof(T), sizeof(T));
    if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
      out[i] = to_f32(x);
    else
      out[i] = static_cast<double>(x);
  }
}

template <typename T>
void narrow(const std::vector<double>& values, std::vector<char>& bytes) {
  for (size_t i = 0; i < values.size(); ++i) {
    T x;
    if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>)
      x = round_to<T>(static_cast<float>(values[i]));
    else
      x = static_cast<T>(values[i]);
    std::memcpy(bytes.data() + i * sizeof(T), &x, sizeof(T));
  }
}

// Calls f(T{}) with the host type of `dtype`.
template <typename F>
void with_host_type(DType dtype, F f) {
  switch (dtype) {
    case DType::f32:
      return f(float{});
    case DType::bf16:
      return f(bf16{});
    case DType::f16:
      return f(f16{});
    case DType::f64:
      return f(double{});
    case DType::i32:
      return f(int32_t{});
    case DType::u8:
      return f(uint8_t{});
    default:
      throw std::logic_error("backend ops: no host type for " + std::string(dtype_name(dtype)));
  }
}

bool is_float(DType dtype) {
  return dtype == DType::f32 || dtype == DType::bf16 || dtype == DType::f16 || dtype == DType::f64;
}

// What the harness fills a view with before the run, and what it checks after.
enum class Use {
  untouched,  // no op names it (sentinels, unused batch tensors): filled, and must be left as it was
  input,      // only read: filled, and must be left as it was
  output,     // written before any op reads it: NaN, and must hold finite values after
  update,     // read and written (accumulated, in place): filled, and must hold finite values after
  scratch,    // a kernel's workspace: NaN (a kernel must not read what it did not write), not compared
};

// How each tensor of the graph (and each parameter's gradient) is used, from the first op that names it.
struct Uses {
  std::vector<Use> tensor, grad;
};

Uses uses_of(const Graph& graph, bool training) {
  Uses uses{std::vector<Use>(graph.table.size(), Use::untouched),
            std::vector<Use>(graph.table.size(), Use::untouched)};
  for (const Op& op : graph.ops) {
    for_each_operand_role(op, training, [&](const Operand& o) {
      Use& use = (o.grad ? uses.grad : uses.tensor)[static_cast<size_t>(o.id)];
      if (o.role == Role::scratch)
        use = Use::scratch;
      else if (use == Use::untouched)
        use = o.role == Role::read ? Use::input : o.role == Role::write ? Use::output : Use::update;
      else if (use == Use::input && o.role != Role::read)
        use = Use::update;
    });
  }
  return uses;
}

// A tensor as the harness fills, reads and checks it: a parameter's weights and its gradient are two views.
struct View {
  std::string name;
  int id = -1;
  bool grad = false;
  void* data = nullptr;
  DType dtype = DType::f32;  // u8 for the bytes of a quantized weight
  int64_t n = 0;
  Use use = Use::untouched;
};

std::vector<View> views_of(const ModelGraph& model, const Allocation& memory, bool training) {
  const TensorTable& table = model.graph.table;
  const Uses uses = uses_of(model.graph, training);
  std::vector<View> views;
  for (int id = 0; id < table.size(); ++id) {
    const TensorDesc& t = table[id];
    Use use = uses.tensor[static_cast<size_t>(id)];
    // Workspace no op names is the device's: the builder's conversion tiles in a case without a product.
    if (use == Use::untouched && t.category == Category::workspace) use = Use::scratch;
    if (t.quantized)
      views.push_back({t.name, id, false, memory.data(id), DType::u8, t.bytes(), use});
    else
      views.push_back({t.name, id, false, memory.data(id), t.dtype, t.numel(), use});
    if (t.category == Category::params)
      views.push_back({"grad(" + t.name + ")", id, true, memory.grads_at(memory.param_offset(id)),
                       memory.plan().policy.grads, t.numel(), uses.grad[static_cast<size_t>(id)]});
  }
  return views;
}

// Deterministic values for a view that is read: batch tensors valid for the model (tokens and targets in the
// vocabulary, positions restarting every few tokens as packed records do, a loss mask counting two thirds),
// everything else drawn from N(0, scale^2) keyed by the view's name.
std::vector<double> fill_values(const View& v, const ModelGraph& model, const ModelSpec& spec) {
  std::vector<double> x(static_cast<size_t>(v.n));
  const uint64_t stream = hash_name(v.name);
  const BatchTensors& batch = model.batch();
  const int64_t T = model.graph.table[batch.tokens].shape[1];
  const Category category = model.graph.table[v.id].category;
  const bool weight = category == Category::params || category == Category::frozen;
  const double scale = v.grad ? 0.25 : weight ? 0.5 : 1.0;
  for (int64_t i = 0; i < v.n; ++i) {
    double& value = x[static_cast<size_t>(i)];
    if (!v.grad && (v.id == batch.tokens || v.id == batch.targets))
      value = static_cast<double>(
          random_below(kFillSeed, stream, static_cast<uint64_t>(i), static_cast<uint64_t>(spec.vocab_size)));
    else if (!v.grad && v.id == batch.positions)
      value = static_cast<double>(i % T % (3 + i / T % 3));
    else if (!v.grad && v.id == batch.loss_mask)
      value = i % 3 == 1 ? 0 : 1;
    else
      value = random_normal(kFillSeed, stream, static_cast<uint64_t>(i)) * scale;
  }
  return x;
}

// A quantized frozen weight is quantized by the device from host values, part by part, as loading does.
void fill_quantized(Device& device, const View& v, const TensorDesc& t, const ModelGraph& model,
                    const ModelSpec& spec) {
  const View values{.name = v.name, .id = v.id, .n = t.numel()};
  const std::vector<double> wide = fill_values(values, model, spec);
  const std::vector<float> host(wide.begin(), wide.end());
  int64_t first = 0;
  for (const QuantizedWeight& part : t.quantized->views(v.data)) {
    device.quantize_weight(host.data() + first, part);
    first += part.n;
  }
}

std::vector<char> poison(DType dtype, int64_t n) {
  const std::vector<double> nan(static_cast<size_t>(n), std::numeric_limits<double>::quiet_NaN());
  std::vector<char> bytes(static_cast<size_t>(n) * dtype_size(dtype), static_cast<char>(0xff));
  if (is_float(dtype)) with_host_type(dtype, [&](auto type) { narrow<decltype(type)>(nan, bytes); });
  return bytes;
}

void fill(Device& device, const View& v, const ModelGraph& model, const ModelSpec& spec) {
  if (v.use == Use::output || v.use == Use::scratch) {
    device.copy_from_host(v.data, poison(v.dtype, v.n).data(),
                          v.n * static_cast<int64_t>(dtype_size(v.dtype)));
  } else if (const TensorDesc& t = model.graph.table[v.id]; t.quantized && !v.grad) {
    fill_quantized(device, v, t, model, spec);
  } else {
    write_values(device, v.data, v.dtype, fill_values(v, model, spec));
  }
}

TensorMap read_views(Device& device, const std::vector<View>& views) {
  TensorMap out;
  for (const View& v : views)
    if (v.use != Use::scratch) out[v.name] = {read_values(device, v.data, v.dtype, v.n), !is_float(v.dtype)};
  return out;
}

// What a run left wrong on its own, without a reference: a non-finite value in what the ops write (an element
// left NaN is an element not written), or a change to what they only read.
void check_views(const std::vector<View>& views, const CaseRun& run, std::vector<std::string>& problems) {
  for (const View& v : views) {
    if (v.use == Use::scratch) continue;
    const std::vector<double>& before = run.before.at(v.name).values;
    const std::vector<double>& after = run.after.at(v.name).values;
    for (size_t i = 0; i < after.size(); ++i) {
      const bool written = v.use == Use::output || v.use == Use::update;
      if (written && is_float(v.dtype) && !std::isfinite(after[i])) {
        problems.push_back(v.name + ": element " + std::to_string(i) + " is " + std::to_string(after[i]) +
                           " after the run (not written?)");
        break;
      }
      if (!written && std::memcmp(&before[i], &after[i], sizeof(double)) != 0) {
        problems.push_back(v.name + ", which no op writes, changed at element " + std::to_string(i));
        break;
      }
    }
  }
}

// The targets the loss counts in all of the graph's batches together.
int64_t counted_targets(const ModelGraph& model, const TensorMap& before) {
  int64_t counted = 0;
  for (const BatchTensors& batch : model.batches) {
    const TensorTable& table = model.graph.table;
    if (batch.loss_mask < 0) {
      counted += table[batch.targets].numel();
      continue;
    }
    for (double m : before.at(table[batch.loss_mask].name).values) counted += m != 0;
  }
  return counted;
}

void run_in_memory(const OpCase& c, const ModelGraph& model, const Plan& plan, GuardedBackend& backend,
                   const CaseRunner& runner, CaseRun& out) {
  Allocation memory(model.graph.table, plan, backend);
  backend.label(memory);
  const std::vector<View> views = views_of(model, memory, c.training);
  for (const View& v : views) fill(backend, v, model, c.spec);
  out.before = read_views(backend, views);
  OpRun run{c.spec, model.graph, memory, c.training, kGradScale, kDraw, counted_targets(model, out.before)};
  run.tp = c.step.tp;
  run.tp_rank = c.step.tp_rank;
  if (c.step.tp > 1) {
    // The split vocabulary's softmax gathers every rank's row statistics: a peer that holds this rank's.
    run.gather_row_stats = [&backend, &c](float* stats, int64_t floats) {
      for (int r = 0; r < c.step.tp; ++r)
        if (r != c.step.tp_rank)
          backend.copy(stats + r * floats, stats + c.step.tp_rank * floats, floats * 4);
    };
  }
  TensorMap extra = runner({c, model, memory, backend, run});
  out.after = read_views(backend, views);
  check_views(views, out, out.problems);
  out.after.merge(extra);
}

// The tolerance of a layout, relative to |reference| plus the reference tensor's RMS, so that an element near
// zero (a difference of larger terms) is held to the error of those terms. Backends may differ in summation
// order, FMA contraction and the products' path (the CPU's levels: vector width, and bf16 products as native
// dot products at avx512_bf16 or fp32 tiles below), never in what they compute. fp32: a few ulps (2^-23) of
// sums over ~100 terms; the CPU's levels differ by under 1e-6. 16-bit storage rounds every output to its
// last place (bf16 2^-8, f16 2^-11), and a case's backward reads its forward's rounded outputs: four units of
// the last place, where a rounding that went the other way on each of a few operands lands.
double tolerance(const Layout& layout) {
  switch (layout.weights) {
    case DType::bf16:
      return 0x1p-6;
    case DType::f16:
      return 0x1p-9;
    default:
      return 1e-5;
  }
}

std::string compare_tensor(const std::string& name, const TensorValues& got, const TensorValues& want,
                           double tol) {
  if (got.values.size() != want.values.size())
    return name + ": " + std::to_string(got.values.size()) + " elements, the reference has " +
           std::to_string(want.values.size());
  double squares = 0;
  for (double w : want.values) squares += w * w;
  const double rms = want.values.empty() ? 0 : std::sqrt(squares / static_cast<double>(want.values.size()));
  int64_t bad = 0, worst = -1;
  double worst_excess = 0;
  for (size_t i = 0; i < want.values.size(); ++i) {
    const double a = got.values[i], b = want.values[i];
    if (std::isnan(a) && std::isnan(b)) continue;  // reported as not written by the run's own checks
    const double allowed = want.exact ? 0 : tol * (std::abs(b) + rms);
    const double excess =
        std::isnan(a - b) ? std::numeric_limits<double>::infinity() : std::abs(a - b) / allowed;
    if (!(std::abs(a - b) <= allowed)) {
      ++bad;
      if (worst < 0 || excess > worst_excess) worst = static_cast<int64_t>(i), worst_excess = excess;
    }
  }
  if (bad == 0) return {};
  const size_t w = static_cast<size_t>(worst);
  return name + ": " + std::to_string(bad) + " of " + std::to_string(want.values.size()) +
         " elements differ; worst at " + std::to_string(worst) + ": " + std::to_string(got.values[w]) +
         ", reference " + std::to_string(want.values[w]) + " (tolerance " +
         std::to_string(want.exact ? 0 : tol * (std::abs(want.values[w]) + rms)) + ")";
}

}  // namespace

std::vector<double> read_values(Device& device, const void* data, DType dtype, int64_t n) {
  std::vector<char> bytes(static_cast<size_t>(n) * dtype_size(dtype));
  device.copy_to_host(bytes.data(), data, static_cast<int64_t>(bytes.size()));
  std::vector<double> out(static_cast<size_t>(n));
  with_host_type(dtype, [&](auto type) { widen<decltype(type)>(bytes, out); });
  return out;
}

void write_values(Device& device, void* data, DType dtype, const std::vector<double>& values) {
  std::vector<char> bytes(values.size() * dtype_size(dtype));
  with_host_type(dtype, [&](auto type) { narrow<decltype(type)>(values, bytes); });
  device.copy_from_host(data, bytes.data(), static_cast<int64_t>(bytes.size()));
}

BackendUnderTest cpu_backend_at(CpuIsa level) {
  const CpuTarget target{.isa = level, .threads = omp_get_max_threads()};
  return {
      .name = "cpu_" + std::string(cpu_isa_name(level)),
      .traits = [target](DType dtype, int64_t seq_len,
                         int64_t head_dim) { return cpu_device_traits(target, dtype, seq_len, head_dim); },
      .make = [target](const ModelStatePolicy& policy) { return make_cpu_backend(target, policy); },
      .scope =
          [level](const std::function<void()>& body) {
            // The kernels dispatch on the process's active level: the reference runs at generic.
            struct Restore {
              CpuIsa saved = kernels::cpu_isa();
              ~Restore() { kernels::set_cpu_isa(saved); }
            } restore;
            kernels::set_cpu_isa(level);
            body();
          }};
}

std::vector<BackendUnderTest> backends_under_test() {
#ifdef MEMTRAIN_BACKEND_OPS_CUDA
  return {cuda_backend_under_test()};
#else
  return {cpu_backend_at(process_cpu_isa())};
#endif
}

std::string Layout::name() const {
  return "weights " + std::string(dtype_name(weights)) + ", gradients " + std::string(dtype_name(grads));
}

std::vector<Layout> cpu_layouts() {
  return {{DType::f32, DType::f32},
          {DType::bf16, DType::f32},
          {DType::bf16, DType::bf16},
          {DType::f16, DType::f32}};
}

ModelGraph build_case(const OpCase& c, const Layout& layout, const DeviceTraits& traits) {
  StepConfig step = c.step;
  step.dtype = layout.weights;
  step.device = traits;
  ModelGraph model;
  GraphBuilder g(model, step);
  // Parameters share one flat buffer per model state: a kernel that writes past its parameter's weights or
  // gradient lands in a sentinel, which must come out as it went in.
  const auto sentinel = [&](const std::string& name) {
    model.graph.table.add({.name = name, .shape = {19}, .dtype = step.dtype, .category = Category::params});
  };
  sentinel("sentinel.before");
  CaseBuilder builder{g, model, c.spec};
  c.build(builder);
  sentinel("sentinel.after");
  // No lifetimes (GraphBuilder::finish): every tensor gets a buffer of its own, not a place in an arena.
  std::vector<bool> used(static_cast<size_t>(model.graph.table.size()));
  for (const Op& op : model.graph.ops)
    op.for_each_operand([&](int id) { used[static_cast<size_t>(id)] = true; });
  std::set<std::string> names;
  for (int id = 0; id < model.graph.table.size(); ++id) {
    const TensorDesc& t = model.graph.table[id];
    // The builder adds the conversion tiles whether or not the case has a product.
    const bool own = t.category == Category::activations ||
                     (t.category == Category::workspace && t.name != "matmul.scratch");
    if (own && !used[static_cast<size_t>(id)]) throw std::logic_error("backend ops: no op uses " + t.name);
    if (!names.insert(t.name).second) throw std::logic_error("backend ops: two tensors named " + t.name);
  }
  return model;
}

TensorMap run_through_backend(const CaseContext& context) {
  const Graph& graph = context.model.graph;
  context.backend.begin_pass(graph);
  for (const Op& op : graph.ops) context.backend.run(op, context.run);
  TensorMap logits;
  if (graph.tp > 1) return logits;  // a split vocabulary has no whole logits
  for (const Op& op : graph.ops) {
    if (op.kind() != OpKind::lm_head_loss) continue;
    const auto& head = op.as<ops::LmHeadLoss>();
    const int64_t n = graph.table[head.targets].numel() * graph.table[head.weight].shape[0];
    std::vector<float> host(static_cast<size_t>(n));
    context.backend.logits(op, context.run, host.data());
    logits["logits(" + op.name + ")"] = {{host.begin(), host.end()}, false};
  }
  return logits;
}

CaseRun run_case(const OpCase& c, const Layout& layout, const BackendUnderTest& backend,
                 const CaseRunner& runner) {
  CaseRun out;
  backend.scope([&] {
    const DeviceTraits traits = backend.traits(layout.weights, c.step.seq_len, c.spec.head_dim());
    const ModelGraph model = build_case(c, layout, traits);
    const Plan plan = make_plan(model.graph.table, traits.alignment, policy_of(layout));
    const std::unique_ptr<Backend> inner = backend.make(plan.policy);
    GuardedBackend guarded(*inner);
    try {
      run_in_memory(c, model, plan, guarded, runner, out);
    } catch (const std::exception& e) {
      out.problems.push_back(std::string("threw: ") + e.what());
    }
    for (const std::string& p : guarded.problems()) out.problems.push_back(p);
  });
  return out;
}

std::vector<std::string> compare(const CaseRun& run, const CaseRun& reference, const Layout& layout) {
  std::vector<std::string> mismatches;
  for (const auto& [name, want] : reference.after) {
    const auto got = run.after.find(name);
    if (got == run.after.end())
      mismatches.push_back(name + ": missing from the run");
    else if (std::string m = compare_tensor(name, got->second, want, tolerance(layout)); !m.empty())
      mismatches.push_back(std::move(m));
  }
  for (const auto& [name, got] : run.after)
    if (!reference.after.contains(name)) mismatches.push_back(name + ": not in the reference run");
  return mismatches;
}

}  // namespace mt::backend_ops
