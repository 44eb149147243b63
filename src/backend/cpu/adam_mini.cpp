#include "backend/cpu/adam_mini.h"

#include <vector>

#include "backend/cpu/adamw_math.h"
#include "backend/cpu/isa_variant.h"

namespace mt::kernels {

namespace MT_ISA {

namespace {

// The blocks' new second moments: each block's sum of g^2 over its lines, line by line in index order.
template <typename G>
void update_second_moments(const G* grad, float* v, const MiniBlockLayout& b, const Coefficients& c) {
  const int64_t lines = b.by_column ? b.cols : b.rows, length = b.by_column ? b.rows : b.cols;
  std::vector<double> line_sum(static_cast<size_t>(lines));
#pragma omp parallel for
  for (int64_t i = 0; i < lines; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < length; ++j) {
      const float g = to_f32(grad[b.by_column ? j * b.cols + i : i * b.cols + j]) * c.grad_multiplier;
      sum += static_cast<double>(g * g);
    }
    line_sum[static_cast<size_t>(i)] = sum;
  }
  std::vector<double> sum(static_cast<size_t>(b.count));
  std::vector<int64_t> lines_in(static_cast<size_t>(b.count));
  for (int64_t i = 0; i < lines; ++i) {
    sum[static_cast<size_t>(b.block_of[i])] += line_sum[static_cast<size_t>(i)];
    ++lines_in[static_cast<size_t>(b.block_of[i])];
  }
  for (int64_t k = 0; k < b.count; ++k) {
    const float mean = static_cast<float>(sum[k] / static_cast<double>(lines_in[k] * length));
    v[k] = std::fma(v[k], c.v_keep, c.v_weight * mean);
  }
}

template <Weights kWeights, typename P, typename G, typename M>
void update(float* master, P* param, const G* grad, M* m, const float* v, const MiniBlockLayout& b,
            const Coefficients& c, uint64_t seed, uint64_t index) {
  const int64_t n = b.rows * b.cols;
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) {
    const int64_t line = b.by_column ? i % b.cols : i / b.cols;
    const ElementStep e =
        adam_element(load_weight<kWeights>(master, param, i), to_f32(grad[i]) * c.grad_multiplier,
                     to_f32(m[i]), v[b.block_of[line]], c);
    m[i] = round_to<M>(e.m);
    store_weight<kWeights>(master, param, i, e.weight, seed, index + static_cast<uint64_t>(i));
  }
}

}  // namespace

template <typename P, typename G, typename M>
void adam_mini_update(float* master, P* param, const G* grad, M* m, float* v, const MiniBlockLayout& blocks,
                      const AdamWStep& s, const AdamWRounding& rounding) {
  const Coefficients c(s);
  update_second_moments(grad, v, blocks, c);
  with_weights<P>(master, [&](auto weights) {
    update<decltype(weights)::value>(master, param, grad, m, v, blocks, c, rounding.seed,
                                     static_cast<uint64_t>(rounding.index));
  });
}

}  // namespace MT_ISA

#ifdef MEMTRAIN_KERNEL_ENTRY_POINTS
template <typename P, typename G, typename M>
void adam_mini_update(float* master, P* param, const G* grad, M* m, float* v, const MiniBlockLayout& blocks,
                      const AdamWStep& s, const AdamWRounding& rounding) {
  dispatch<&adam_mini_update<P, G, M>>(master, param, grad, m, v, blocks, s, rounding);
}

#define MT_INSTANTIATE_ADAM_MINI(P, G, M)                                                           \
  template void adam_mini_update<P, G, M>(float*, P*, const G*, M*, float*, const MiniBlockLayout&, \
                                          const AdamWStep&, const AdamWRounding&);
#define MT_INSTANTIATE_ADAM_MINI_MOMENTS(P, G) \
  MT_INSTANTIATE_ADAM_MINI(P, G, float) MT_INSTANTIATE_ADAM_MINI(P, G, bf16)
#define MT_INSTANTIATE_ADAM_MINI_GRADS(P) \
  MT_INSTANTIATE_ADAM_MINI_MOMENTS(P, float) MT_INSTANTIATE_ADAM_MINI_MOMENTS(P, bf16)
MT_INSTANTIATE_ADAM_MINI_GRADS(float)
MT_INSTANTIATE_ADAM_MINI_GRADS(bf16)
MT_INSTANTIATE_ADAM_MINI_GRADS(f16)
#undef MT_INSTANTIATE_ADAM_MINI_GRADS
#undef MT_INSTANTIATE_ADAM_MINI_MOMENTS
#undef MT_INSTANTIATE_ADAM_MINI
#endif

namespace MT_ISA {
// Enrolled at start-up; the helpers are this file's own (other files have their namesakes).
namespace {
template <typename P>
bool enroll_weights() {
  return enroll<&kernels::adam_mini_update<P, float, float>>(adam_mini_update) &&
         enroll<&kernels::adam_mini_update<P, float, bf16>>(adam_mini_update) &&
         enroll<&kernels::adam_mini_update<P, bf16, float>>(adam_mini_update) &&
         enroll<&kernels::adam_mini_update<P, bf16, bf16>>(adam_mini_update);
}
const bool enrolled = enroll_weights<float>() && enroll_weights<bf16>() && enroll_weights<f16>();
}  // namespace
}  // namespace MT_ISA

}  // namespace mt::kernels
