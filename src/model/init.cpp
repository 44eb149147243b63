#include "model/init.h"

#include <algorithm>

#include "core/rng.h"

namespace mt {

namespace {

// One tensor's initial value at element i, in fp32.
class InitialValues {
 public:
  InitialValues(const TensorDesc& t, const InitRule& rule, uint64_t seed)
      : seed_(seed), stream_(hash_name(t.name)), rule_(rule) {}
  float operator()(int64_t i) const {
    if (rule_.stddev == 0.0f) return rule_.constant;
    return i < rule_.drawn ? rule_.stddev * static_cast<float>(random_normal(seed_, stream_, i)) : 0.0f;
  }

 private:
  uint64_t seed_, stream_;
  InitRule rule_;
};

// dst[i] = value(first + i) as T, for i in [0, n).
template <typename T>
void fill(T* dst, const InitialValues& value, int64_t first, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) dst[i] = round_to<T>(value(first + i));
}

}  // namespace

void init_params(const ModelGraph& model, Allocation& memory, uint64_t seed,
                 const std::function<InitRule(const TensorDesc&)>& rule) {
  const Plan& plan = memory.plan();
  for (int id : model.params) {
    const TensorDesc& t = model.graph.table[id];
    const InitialValues value(t, rule(t), seed);
    const int64_t offset = memory.param_offset(id), n = t.numel();
    if (t.dtype == DType::f32) fill(memory.f32(id), value, 0, n);
    if (t.dtype == DType::bf16) fill(memory.as<bf16>(id), value, 0, n);
    if (t.dtype == DType::f16) fill(memory.as<f16>(id), value, 0, n);
    // The master copy holds the exact fp32 values of this rank's part of the tensor.
    const int64_t begin = std::max(offset, plan.shard_begin), end = std::min(offset + n, plan.shard_end);
    if (memory.master() && begin < end)
      fill(memory.master() + (begin - plan.shard_begin), value, begin - offset, end - begin);
  }
}

}  // namespace mt
