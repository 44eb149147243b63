#include "ckpt/flat_states.h"

#include <algorithm>

#include "core/error.h"

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
  tensors.push_back(
      {"adam_v", plan.policy.moments, [](const StateWindow& w) { return static_cast<char*>(w.v); }});
  return tensors;
}

RankFiles::RankFiles(const std::string& checkpoint_dir, const CheckpointLayout& layout) {
  for (int r = 0; r < layout.world; ++r) {
    files_.push_back(std::make_unique<SafetensorsReader>(checkpoint_dir + "/" + rank_file_name(r)));
    ranges_.push_back(save_range(layout.num_params, layout.world, r));
  }
}

void RankFiles::read(const std::string& name, DType dtype, FlatRange range, char* dst) const {
  const int64_t size = static_cast<int64_t>(dtype_size(dtype));
  for (size_t r = 0; r < files_.size(); ++r) {
    const FlatRange& saved = ranges_[r];
    const int64_t first = std::max(range.begin, saved.begin), last = std::min(range.end, saved.end);
    if (first >= last) continue;
    const SafetensorsReader& file = *files_[r];
    const TensorEntry* entry = file.find(name);
    if (!entry) fail_data(file.path() + ": missing tensor " + name);
    if (entry->dtype != dtype || entry->numel() != saved.size())
      fail_data(file.path() + ": tensor " + name + " is " + std::string(dtype_name(entry->dtype)) + " [" +
                std::to_string(entry->numel()) + "], expected " + std::string(dtype_name(dtype)) + " [" +
                std::to_string(saved.size()) + "]");
    file.read_part(*entry, static_cast<uint64_t>((first - saved.begin) * size),
                   static_cast<uint64_t>((last - first) * size), dst + (first - range.begin) * size);
  }
}

}  // namespace mt::ckpt
