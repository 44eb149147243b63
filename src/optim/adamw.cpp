#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "backend/cpu/adamw.h"
#include "backend/cpu/adamw_8bit.h"
#include "core/rng.h"

namespace mt {

namespace {

double sum_of_squares(const Allocation& memory, int64_t begin, int64_t end) {
  return memory.plan().policy.grads == DType::bf16
             ? kernels::sum_of_squares(memory.grads_from<bf16>(begin), end - begin)
             : kernels::sum_of_squares(memory.grads_from<float>(begin), end - begin);
}

}  // namespace

// Fixed-order reductions over this rank's gradient range: the same norm for any thread count. One over the
// contiguous range, or one per tensor where some are left out (ParamGroup::in_norm).
double AdamW::local_sum_of_squares(const Allocation& memory) const {
  const Plan& plan = memory.plan();
  if (std::all_of(params_.begin(), params_.end(), [](const ParamGroup& p) { return p.in_norm; }))
    return sum_of_squares(memory, plan.shard_begin, plan.shard_end);
  double sum = 0;
  for (const ParamGroup& p : params_) {
    const int64_t offset = memory.param_offset(p.id);
    const int64_t first = std::max(offset, plan.shard_begin),
                  last = std::min(offset + memory.table()[p.id].numel(), plan.shard_end);
    if (p.in_norm && first < last) sum += sum_of_squares(memory, first, last);
  }
  return sum;
}

OptimizerStepResult AdamW::step(const TensorTable& table, Allocation& memory, float lr, float loss_scale,
                                const GlobalSum& global_sum) {
  const Plan& plan = memory.plan();
  const ModelStatePolicy& policy = plan.policy;
  const double norm = std::sqrt(global_sum(local_sum_of_squares(memory))) / loss_scale;
  if (!std::isfinite(norm)) return {norm, true};
  float multiplier = 1.0f / loss_scale;
  if (config_.clip_grad > 0) {
    // As torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1.
    const double coef = static_cast<double>(config_.clip_grad) / (norm + 1e-6);
    if (coef < 1.0) multiplier = static_cast<float>(coef / loss_scale);
  }
  ++updates_;
  if (policy.blocked_moments()) {
    update_blocked(memory, lr, multiplier);
    return {norm, false};
  }
  const bool bf16_grads = policy.grads == DType::bf16, bf16_moments = policy.moments == DType::bf16;
  switch (policy.weights) {
    case DType::f32:
      update<float, float, float>(table, memory, lr, multiplier);
      break;
    case DType::f16:
      update<f16, float, float>(table, memory, lr, multiplier);
      break;
    case DType::bf16:
      if (bf16_grads && bf16_moments)
        update<bf16, bf16, bf16>(table, memory, lr, multiplier);
      else if (bf16_grads)
        update<bf16, bf16, float>(table, memory, lr, multiplier);
      else if (bf16_moments)
        update<bf16, float, bf16>(table, memory, lr, multiplier);
      else
        update<bf16, float, float>(table, memory, lr, multiplier);
      break;
    default:
      throw std::logic_error("AdamW: weights of dtype " + std::string(dtype_name(policy.weights)));
  }
  return {norm, false};
}

void AdamW::update_blocked(Allocation& memory, float lr, float grad_multiplier) {
  const ModelStatePolicy& policy = memory.plan().policy;
  const bool bf16_grads = policy.grads == DType::bf16;
  switch (policy.weights) {
    case DType::f32:
      return bf16_grads ? update_blocked<float, bf16>(memory, lr, grad_multiplier)
                        : update_blocked<float, float>(memory, lr, grad_multiplier);
    case DType::bf16:
      return bf16_grads ? update_blocked<bf16, bf16>(memory, lr, grad_multiplier)
                        : update_blocked<bf16, float>(memory, lr, grad_multiplier);
    case DType::f16:
      return bf16_grads ? update_blocked<f16, bf16>(memory, lr, grad_multiplier)
                        : update_blocked<f16, float>(memory, lr, grad_multiplier);
    default:
      throw std::logic_error("AdamW: weights of dtype " + std::string(dtype_name(policy.weights)));
  }
}

template <typename P, typename G>
void AdamW::update_blocked(Allocation& memory, float lr, float grad_multiplier) {
  // One kernel call per window (whole blocks, from a block's start): the tensors it covers are runs of
  // one weight decay each.
  const Plan& plan = memory.plan();
  const kernels::MomentFormat format =
      plan.policy.moments == DType::u8 ? kernels::MomentFormat::int8 : kernels::MomentFormat::fp8;
  const kernels::AdamWStep s{lr,       config_.beta1,  config_.beta2, config_.eps, config_.weight_decay,
                             updates_, grad_multiplier};
  memory.optimizer_state().visit(
      plan.shard_begin, plan.shard_end, StateAccess::update, [&](const StateWindow& window) {
        std::vector<kernels::DecayRun> runs;
        for (const ParamGroup& p : params_) {
          const int64_t offset = memory.param_offset(p.id);
          const int64_t first = std::max(offset, window.begin);
          if (first < std::min(offset + memory.table()[p.id].numel(), window.end))
            runs.push_back({first - window.begin, p.decay});
        }
        std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
        const kernels::QuantizedMoments moments{format, static_cast<uint8_t*>(window.m), window.m_scales,
                                                static_cast<uint8_t*>(window.v), window.v_scales};
        const kernels::AdamWRounding rounding{false, mix64(config_.seed) ^ mix64(updates_), window.begin};
        kernels::adamw_update_8bit(window.master, memory.weights_from<P>(window.begin),
                                   memory.grads_from<G>(window.begin), moments, window.end - window.begin, s,
                                   runs, rounding);
      });
}

template <typename P, typename G, typename M>
void AdamW::update(const TensorTable& table, Allocation& memory, float lr, float grad_multiplier) {
  // Master weights and moments cover the plan's shard of the flat parameters, visited in windows: one in
  // memory, chunks when offloaded. The kernel is elementwise and its rounding bits follow the flat index, so
  // any split gives the same bits.
  const Plan& plan = memory.plan();
  memory.optimizer_state().visit(
      plan.shard_begin, plan.shard_end, StateAccess::update,
      [&](const StateWindow& window) { update_window<P, G, M>(table, memory, window, lr, grad_multiplier); });
}

template <typename P, typename G, typename M>
void AdamW::update_window(const TensorTable& table, Allocation& memory, const StateWindow& window, float lr,
                          float grad_multiplier) {
  // Each tensor is updated where it overlaps the window [begin, end).
  const int64_t begin = window.begin, end = window.end;
  M* m = static_cast<M*>(window.m);
  M* v = static_cast<M*>(window.v);
  float* master = window.master;
  for (const ParamGroup& p : params_) {
    const int64_t offset = memory.param_offset(p.id);
    const int64_t first = std::max(offset, begin), last = std::min(offset + table[p.id].numel(), end);
    if (first >= last) continue;
    const kernels::AdamWStep s{
        lr,       config_.beta1,  config_.beta2, config_.eps, p.decay ? config_.weight_decay : 0.0f,
        updates_, grad_multiplier};
    // Each update draws fresh rounding bits: the seed changes with t, the index with the flat element, so
    // the bits do not depend on how the parameters are sharded.
    const kernels::AdamWRounding rounding{config_.stochastic_moments, mix64(config_.seed) ^ mix64(updates_),
                                          first};
    const int64_t local = first - begin;
    kernels::adamw_update(master ? master + local : nullptr, memory.weights_from<P>(first),
                          memory.grads_from<G>(first), m + local, v + local, last - first, s, rounding);
  }
}

}  // namespace mt
