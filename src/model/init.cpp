#include "model/init.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/lora.h"

namespace mt {

namespace {

// One tensor's initial value at element i, in fp32.
class InitialValues {
 public:
  InitialValues(const TensorDesc& t, const InitRule& rule, uint64_t seed)
      : seed_(seed), stream_(hash_name(t.name)), rule_(rule), shard_(t.shard) {}
  // A tensor-parallel shard draws its elements of the whole tensor, as one process would.
  float operator()(int64_t local) const {
    const int64_t i = shard_ ? shard_->whole_index(local) : local;
    if (rule_.uniform_bound > 0.0f)
      return rule_.uniform_bound * static_cast<float>(2.0 * random_uniform(seed_, stream_, i) - 1.0);
    if (rule_.stddev == 0.0f) return rule_.constant;
    return i < rule_.drawn ? rule_.stddev * static_cast<float>(random_normal(seed_, stream_, i)) : 0.0f;
  }

 private:
  uint64_t seed_, stream_;
  InitRule rule_;
  std::optional<TensorShard> shard_;
};

// dst[i] = value(first + i) as T, for i in [0, n).
template <typename T>
void fill(T* dst, const InitialValues& value, int64_t first, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) dst[i] = round_to<T>(value(first + i));
}

// n elements of `dtype` at dst, in the device's memory, from value(first): filled a host piece at a time.
void fill_on_device(Device& device, void* dst, DType dtype, const InitialValues& value, int64_t first,
                    int64_t n) {
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  device.write(dst, n * size, [&](char* piece, int64_t offset, int64_t bytes) {
    const int64_t at = first + offset / size, count = bytes / size;
    switch (dtype) {
      case DType::f32:
        return fill(reinterpret_cast<float*>(piece), value, at, count);
      case DType::bf16:
        return fill(reinterpret_cast<bf16*>(piece), value, at, count);
      case DType::f16:
        return fill(reinterpret_cast<f16*>(piece), value, at, count);
      default:
        throw std::logic_error("init: parameters of dtype " + std::string(dtype_name(dtype)));
    }
  });
}

// torch's kaiming_uniform_(a=sqrt(5)) on A [r, in], as PEFT draws it: gain sqrt(2 / (1 + 5)), bound
// gain * sqrt(3 / in) = 1 / sqrt(in).
InitRule lora_rule(const TensorDesc& t, const std::function<InitRule(const TensorDesc&)>& family_rule) {
  if (is_lora_a(t.name)) return {.uniform_bound = 1.0f / std::sqrt(static_cast<float>(t.shape[1]))};
  if (is_lora_b(t.name)) return {.constant = 0.0f};
  return family_rule(t);
}

// A frozen weight is held whole by every rank and has no master copy; a quantized one is drawn in fp32 and
// each of its parts quantized, as a loaded one is.
void init_frozen(Device& device, const TensorDesc& t, const InitialValues& value, void* dst) {
  if (t.quantized) {
    std::vector<float> values(static_cast<size_t>(t.numel()));
    fill(values.data(), value, 0, t.numel());
    const float* part = values.data();
    for (const QuantizedWeight& q : t.quantized->views(dst)) {
      device.quantize_weight(part, q);
      part += q.n;
    }
    return;
  }
  fill_on_device(device, dst, t.dtype, value, 0, t.numel());
}

// Parameter `id`'s initial value into its weights (this rank's part) and master copy.
void init_param(const ModelGraph& model, Allocation& memory, int id, const InitialValues& value) {
  const Plan& plan = memory.plan();
  const TensorDesc& t = model.graph.table[id];
  Device& device = memory.device();
  if (t.category == Category::frozen) {
    init_frozen(device, t, value, memory.data(id));
    return;
  }
  const int64_t offset = memory.param_offset(id), n = t.numel();
  // This rank's part of the weights: all of them, or its shard under ZeRO-3.
  const int64_t first = std::max(offset, plan.weights_begin()),
                last = std::min(offset + n, plan.weights_end());
  if (first < last)
    fill_on_device(device, memory.weights_at(first), t.dtype, value, first - offset, last - first);
  // The master copy holds the exact fp32 values of this rank's part of the tensor (streamed into the
  // offload file in chunks when offloaded).
  const int64_t begin = std::max(offset, plan.shard_begin), end = std::min(offset + n, plan.shard_end);
  if (plan.policy.master_weights)
    memory.optimizer_state().visit(begin, end, StateAccess::write_master, [&](const StateWindow& w) {
      fill_on_device(device, w.master, DType::f32, value, w.begin - offset, w.end - w.begin);
    });
}

}  // namespace

void init_params(const ModelGraph& model, Allocation& memory, uint64_t seed,
                 const std::function<InitRule(const TensorDesc&)>& rule) {
  for (int id : model.params) {
    const TensorDesc& t = model.graph.table[id];
    init_param(model, memory, id, InitialValues(t, lora_rule(t, rule), seed));
  }
}

void init_adapters(const ModelGraph& model, Allocation& memory, uint64_t seed) {
  for (int id : model.params)
    if (const TensorDesc& t = model.graph.table[id]; is_lora_a(t.name) || is_lora_b(t.name))
      init_param(model, memory, id, InitialValues(t, lora_rule(t, nullptr), seed));
}

void initial_values(const TensorDesc& t, const InitRule& rule, uint64_t seed, int64_t first, int64_t n,
                    float* dst) {
  fill(dst, InitialValues(t, rule, seed), first, n);
}

}  // namespace mt
