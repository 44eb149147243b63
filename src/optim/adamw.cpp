#include "optim/adamw.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "core/rng.h"

namespace mt {

namespace {

// The flat gradients [begin, end) this rank holds.
double sum_of_squares(const Allocation& memory, int64_t begin, int64_t end) {
  const DType dtype = memory.plan().policy.grads;
  return memory.device().sum_of_squares(memory.grads_at(begin), dtype, end - begin);
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

OptimizerStepResult AdamW::step(Allocation& memory, float lr, float loss_scale, const GlobalSum& global_sum,
                                const GlobalSums& global_sums) {
  const double norm = std::sqrt(global_sum(local_sum_of_squares(memory))) / loss_scale;
  if (!std::isfinite(norm)) return {norm, true};
  ++updates_;
  const Plan& plan = memory.plan();
  const float multiplier = grad_multiplier(norm, loss_scale);
  if (plan.policy.v_blocks > 0) {
    // Every rank steps the second moments of every block, so that each holds one model's v, the same bits,
    // and a shard may cut a block: from the whole gradients up to ZeRO-1, else from the ranks' sums.
    if (plan.policy.grads_in_backward) throw std::logic_error("adam-mini: step under grads_in_backward");
    if (plan.sharding.shards_grads())
      update_second_moments_from_shard(memory, multiplier, global_sums);
    else
      update_second_moments(memory, multiplier, 0, plan.num_params, memory.grads_at(0));
  }
  apply(memory, lr, multiplier, {plan.shard_begin, plan.shard_end, memory.grads_at(plan.shard_begin)});
  return {norm, false};
}

float AdamW::grad_multiplier(double norm, float loss_scale) const {
  // As torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1.
  const double coef = config_.clip_grad > 0 ? static_cast<double>(config_.clip_grad) / (norm + 1e-6) : 1.0;
  return coef < 1.0 ? static_cast<float>(coef / loss_scale) : 1.0f / loss_scale;
}

void AdamW::update_range(Allocation& memory, float lr, float grad_multiplier, int64_t begin, int64_t end,
                         const void* grads) {
  apply(memory, lr, grad_multiplier, {begin, end, grads});
}

void AdamW::update_second_moments(Allocation& memory, float grad_multiplier, int64_t begin, int64_t end,
                                  const void* grads) {
  const Plan& plan = memory.plan();
  if (plan.policy.v_blocks == 0) return;
  check_mini_blocks(plan);
  float* v = memory.optimizer_state().adam_mini_v();
  const auto size = static_cast<int64_t>(dtype_size(plan.policy.grads));
  const AdamWStep s{0.0f, config_.beta1, config_.beta2, config_.eps, 0.0f, updates_, grad_multiplier};
  for (size_t i = 0; i < params_.size(); ++i) {
    const MiniBlocks& b = mini_blocks_[i];
    const int64_t offset = memory.param_offset(params_[i].id), last = offset + b.rows * b.cols;
    if (offset >= end || last <= begin) continue;
    if (offset < begin || last > end)
      throw std::logic_error("adam-mini: second moments of tensor " + memory.table()[params_[i].id].name +
                             " from part of its gradients");
    memory.device().adam_mini_second_moments(static_cast<const char*>(grads) + (offset - begin) * size,
                                             plan.policy.grads, v + b.first, b.layout(), s);
  }
}

void AdamW::update_second_moments_from_shard(Allocation& memory, float grad_multiplier,
                                             const GlobalSums& global_sums) {
  const Plan& plan = memory.plan();
  check_mini_blocks(plan);
  double* sums = memory.adam_mini_sums();
  if (!sums) throw std::logic_error("adam-mini: no planned sums of squares for a shard of the gradients");
  memory.device().zero(sums, plan.v_sums_bytes);
  for (size_t i = 0; i < params_.size(); ++i) {
    const MiniBlocks& b = mini_blocks_[i];
    const int64_t offset = memory.param_offset(params_[i].id);
    const int64_t first = std::max(offset, plan.shard_begin),
                  last = std::min(offset + b.rows * b.cols, plan.shard_end);
    if (first < last)
      memory.device().adam_mini_block_squares(memory.grads_at(first), plan.policy.grads, b.layout(),
                                              first - offset, last - first, grad_multiplier, sums + b.first);
  }
  global_sums(sums, plan.policy.v_blocks);
  float* v = memory.optimizer_state().adam_mini_v();
  const AdamWStep s{0.0f, config_.beta1, config_.beta2, config_.eps, 0.0f, updates_, grad_multiplier};
  for (const MiniBlocks& b : mini_blocks_)
    memory.device().adam_mini_second_moments_from_sums(v + b.first, sums + b.first, b.layout(), s);
}

void AdamW::apply(Allocation& memory, float lr, float grad_multiplier, const Gradients& grads) {
  if (memory.plan().policy.v_blocks > 0)
    update_mini(memory, lr, grad_multiplier, grads);
  else if (memory.plan().policy.blocked_moments())
    update_blocked(memory, lr, grad_multiplier, grads);
  else
    update(memory, lr, grad_multiplier, grads);
}

AdamWOperands AdamW::operands(const Allocation& memory, float* master, int64_t first, int64_t last,
                              const Gradients& grads) const {
  const ModelStatePolicy& policy = memory.plan().policy;
  if (first < grads.begin || last > grads.end)
    throw std::logic_error("adamw: parameters [" + std::to_string(first) + ", " + std::to_string(last) +
                           ") outside the gradients given");
  return {.master = master,
          .weights = memory.weights_at(first),
          .weights_dtype = policy.weights,
          .grads = const_cast<char*>(static_cast<const char*>(grads.data)) +
                   (first - grads.begin) * static_cast<int64_t>(dtype_size(policy.grads)),
          .grads_dtype = policy.grads,
          .n = last - first};
}

void AdamW::update_blocked(Allocation& memory, float lr, float grad_multiplier, const Gradients& grads) {
  // One call per window (whole blocks, from a block's start): the tensors it covers are runs of one weight
  // decay each.
  const Plan& plan = memory.plan();
  const MomentFormat format = plan.policy.moment_format();
  const AdamWStep s{lr,       config_.beta1,  config_.beta2, config_.eps, config_.weight_decay,
                    updates_, grad_multiplier};
  memory.optimizer_state().visit(grads.begin, grads.end, StateAccess::update, [&](const StateWindow& window) {
    std::vector<DecayRun> runs;
    for (const ParamGroup& p : params_) {
      const int64_t offset = memory.param_offset(p.id);
      const int64_t first = std::max(offset, window.begin);
      if (first < std::min(offset + memory.table()[p.id].numel(), window.end))
        runs.push_back({first - window.begin, p.decay});
    }
    std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
    const QuantizedMoments moments{format, static_cast<uint8_t*>(window.m), window.m_scales,
                                   static_cast<uint8_t*>(window.v), window.v_scales};
    const AdamWRounding rounding{false, mix64(config_.seed) ^ mix64(updates_), window.begin};
    memory.device().adamw_update_blocked(operands(memory, window.master, window.begin, window.end, grads),
                                         moments, s, runs, rounding);
  });
}

void AdamW::check_mini_blocks(const Plan& plan) const {
  if (mini_blocks_.size() != params_.size() || adam_mini_block_count(mini_blocks_) != plan.policy.v_blocks)
    throw std::logic_error("adam-mini: the optimizer's blocks are not the plan's");
  for (size_t i = 0; i < params_.size(); ++i)
    if (mini_blocks_[i].param != params_[i].id)
      throw std::logic_error("adam-mini: blocks out of the parameters' order");
}

void AdamW::update_mini(Allocation& memory, float lr, float grad_multiplier, const Gradients& grads) {
  const Plan& plan = memory.plan();
  check_mini_blocks(plan);
  if (plan.policy.blocked_moments()) return update_mini_blocked(memory, lr, grad_multiplier, grads);
  const int64_t moment_size = static_cast<int64_t>(dtype_size(plan.policy.moments));
  const uint64_t seed = mix64(config_.seed) ^ mix64(updates_);
  memory.optimizer_state().visit(grads.begin, grads.end, StateAccess::update, [&](const StateWindow& window) {
    // Each tensor where it overlaps the window: a shard's or a block's edge may cut it.
    for (size_t i = 0; i < params_.size(); ++i) {
      const ParamGroup& p = params_[i];
      const MiniBlocks& b = mini_blocks_[i];
      const int64_t offset = memory.param_offset(p.id);
      const int64_t first = std::max(offset, window.begin),
                    last = std::min(offset + b.rows * b.cols, window.end);
      if (first >= last) continue;
      const AdamWStep s{
          lr,       config_.beta1,  config_.beta2, config_.eps, p.decay ? config_.weight_decay : 0.0f,
          updates_, grad_multiplier};
      const int64_t local = first - window.begin;
      memory.device().adam_mini_update(
          operands(memory, window.master ? window.master + local : nullptr, first, last, grads),
          static_cast<char*>(window.m) + local * moment_size, plan.policy.moments,
          static_cast<const float*>(window.v) + b.first, b.layout(), first - offset, s, {false, seed, first});
    }
  });
}

void AdamW::update_mini_blocked(Allocation& memory, float lr, float grad_multiplier, const Gradients& grads) {
  const Plan& plan = memory.plan();
  const AdamWStep step{lr,       config_.beta1,  config_.beta2, config_.eps, config_.weight_decay,
                       updates_, grad_multiplier};
  const uint64_t seed = mix64(config_.seed) ^ mix64(updates_);
  memory.optimizer_state().visit(grads.begin, grads.end, StateAccess::update, [&](const StateWindow& window) {
    const int64_t first = window.begin, last = window.end;
    // One call over the window, whose quantization blocks straddle the tensors: every tensor with an element
    // in it.
    std::vector<MiniTensor> tensors;
    for (size_t i = 0; i < params_.size(); ++i) {
      const MiniBlocks& b = mini_blocks_[i];
      const int64_t offset = memory.param_offset(params_[i].id), end = offset + b.rows * b.cols;
      if (end <= first || offset >= last) continue;
      tensors.push_back(
          {offset - first, b.layout(), static_cast<float*>(window.v) + b.first, params_[i].decay});
    }
    std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
    memory.device().adam_mini_update_blocked(operands(memory, window.master, first, last, grads),
                                             plan.policy.moment_format(), static_cast<uint8_t*>(window.m),
                                             window.m_scales, tensors, step, {false, seed, first});
  });
}

void AdamW::update(Allocation& memory, float lr, float grad_multiplier, const Gradients& grads) {
  // Master weights and moments cover the plan's shard of the flat parameters, visited in windows: one in
  // memory, chunks when offloaded. The kernel is elementwise and its rounding bits follow the flat index, so
  // any split gives the same bits.
  const Plan& plan = memory.plan();
  const DType moments = plan.policy.moments;
  const int64_t moment_size = static_cast<int64_t>(dtype_size(moments));
  const TensorTable& table = memory.table();
  memory.optimizer_state().visit(grads.begin, grads.end, StateAccess::update, [&](const StateWindow& window) {
    // Each tensor is updated where it overlaps the window [begin, end).
    for (const ParamGroup& p : params_) {
      const int64_t offset = memory.param_offset(p.id);
      const int64_t first = std::max(offset, window.begin),
                    last = std::min(offset + table[p.id].numel(), window.end);
      if (first >= last) continue;
      const AdamWStep s{
          lr,       config_.beta1,  config_.beta2, config_.eps, p.decay ? config_.weight_decay : 0.0f,
          updates_, grad_multiplier};
      // Each update draws fresh rounding bits: the seed changes with t, the index with the flat element,
      // so the bits do not depend on how the parameters are sharded.
      const AdamWRounding rounding{config_.stochastic_moments, mix64(config_.seed) ^ mix64(updates_), first};
      const int64_t local = first - window.begin;
      memory.device().adamw_update(
          operands(memory, window.master ? window.master + local : nullptr, first, last, grads),
          static_cast<char*>(window.m) + local * moment_size,
          static_cast<char*>(window.v) + local * moment_size, moments, s, rounding);
    }
  });
}

}  // namespace mt
