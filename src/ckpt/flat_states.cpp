#include "ckpt/flat_states.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/half.h"

namespace mt::ckpt {

HeldWeights held_weights(const Allocation& memory) {
  const Plan& plan = memory.plan();
  return {
      static_cast<char*>(memory.params()), plan.policy.weights, {plan.weights_begin(), plan.weights_end()}};
}

std::vector<StateTensor> state_tensors(const Plan& plan) {
  std::vector<StateTensor> tensors;
  if (plan.policy.master_weights)
    tensors.push_back(
        {"master", DType::f32, [](const StateWindow& w) { return reinterpret_cast<char*>(w.master); }});
  tensors.push_back(
      {"adam_m", plan.policy.moments, [](const StateWindow& w) { return static_cast<char*>(w.m); }});
  if (plan.policy.v_blocks == 0)
    tensors.push_back(
        {"adam_v", plan.policy.moments, [](const StateWindow& w) { return static_cast<char*>(w.v); }});
  if (plan.policy.blocked_moments()) {
    const int64_t block = plan.policy.moment_block;
    tensors.push_back({"adam_m_scales", DType::f32,
                       [](const StateWindow& w) { return reinterpret_cast<char*>(w.m_scales); }, block});
    if (plan.policy.v_blocks == 0)
      tensors.push_back({"adam_v_scales", DType::f32,
                         [](const StateWindow& w) { return reinterpret_cast<char*>(w.v_scales); }, block});
  }
  return tensors;
}

namespace {

// The first of n stored values that is NaN or infinite, or -1: every floating state a checkpoint holds is
// finite after a step (an overflowing step is skipped), so one that is not is corruption.
int64_t first_non_finite(const char* raw, DType dtype, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::f32 && !std::isfinite(reinterpret_cast<const float*>(raw)[i])) return i;
    if (dtype == DType::bf16 && !std::isfinite(to_f32(reinterpret_cast<const bf16*>(raw)[i]))) return i;
    if (dtype == DType::f16 && !std::isfinite(to_f32(reinterpret_cast<const f16*>(raw)[i]))) return i;
  }
  return -1;
}

}  // namespace

void read_adam_mini_v(const std::string& checkpoint_dir, Allocation& memory) {
  const int64_t blocks = memory.plan().policy.v_blocks;
  const SafetensorsReader file(checkpoint_dir + "/" + rank_file_name(0));
  const TensorEntry* entry = file.find(kAdamMiniVTensor);
  if (!entry || entry->dtype != DType::f32 || entry->numel() != blocks)
    fail_data(file.path() + ": expected tensor " + kAdamMiniVTensor + " F32 [" + std::to_string(blocks) +
              "] (Adam-mini's second moments)");
  memory.device().write(
      memory.optimizer_state().adam_mini_v(), blocks * 4, [&](char* piece, int64_t offset, int64_t bytes) {
        file.read_part(*entry, static_cast<uint64_t>(offset), static_cast<uint64_t>(bytes), piece);
        if (const int64_t bad = first_non_finite(piece, DType::f32, bytes / 4); bad >= 0)
          fail_data(file.path() + ": tensor " + kAdamMiniVTensor + " holds a NaN or infinite value (entry " +
                    std::to_string(offset / 4 + bad) + "): the checkpoint is corrupt");
      });
}

RankFiles::RankFiles(const std::string& checkpoint_dir, const CheckpointLayout& layout, int part) {
  for (int r = 0; r < layout.world; ++r) {
    if (layout.file_part(r).index() != part) continue;
    files_.push_back(std::make_unique<SafetensorsReader>(checkpoint_dir + "/" + rank_file_name(r)));
    ranges_.push_back(layout.file_range(r));
  }
}

void RankFiles::read(const StateTensor& t, FlatRange range, char* dst) const {
  const int64_t size = static_cast<int64_t>(dtype_size(t.dtype));
  for (size_t r = 0; r < files_.size(); ++r) {
    const FlatRange& saved = ranges_[r];
    const int64_t first = std::max(range.begin, saved.begin), last = std::min(range.end, saved.end);
    if (first >= last) continue;
    const SafetensorsReader& file = *files_[r];
    const TensorEntry* entry = file.find(t.name);
    if (!entry) fail_data(file.path() + ": missing tensor " + t.name);
    const int64_t stored = t.entries(saved.begin, saved.end);
    if (entry->dtype != t.dtype || entry->numel() != stored)
      fail_data(file.path() + ": tensor " + t.name + " is " + std::string(dtype_name(entry->dtype)) + " [" +
                std::to_string(entry->numel()) + "], expected " + std::string(dtype_name(t.dtype)) + " [" +
                std::to_string(stored) + "]");
    // Blocked tensors: first is a block's start (both ranges are cut on blocks).
    char* into = dst + (first / t.per - range.begin / t.per) * size;
    file.read_part(*entry, static_cast<uint64_t>((first / t.per - saved.begin / t.per) * size),
                   static_cast<uint64_t>(t.bytes(first, last)), into);
    // Found here, it names the file; trained on, it would read as a diverged step.
    if (const int64_t bad = first_non_finite(into, t.dtype, t.entries(first, last)); bad >= 0)
      fail_data(file.path() + ": tensor " + t.name + " holds a NaN or infinite value (entry " +
                std::to_string(first / t.per - saved.begin / t.per + bad) + "): the checkpoint is corrupt");
  }
}

}  // namespace mt::ckpt
