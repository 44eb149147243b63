#include "ckpt/saved_params.h"

#include <algorithm>
#include <stdexcept>

#include "core/error.h"
#include "model/model.h"

namespace mt::ckpt {

std::vector<int64_t> whole_offsets(const TensorTable& table) {
  std::vector<int64_t> offsets(static_cast<size_t>(table.size()), -1);
  int64_t flat = 0;
  for (int id = 0; id < table.size(); ++id)
    if (table[id].category == Category::params) {
      offsets[static_cast<size_t>(id)] = flat;
      flat += table[id].whole_numel();
    }
  return offsets;
}

SavedParams::SavedParams(const ModelSpec& spec, const CheckpointLayout& layout, const std::string& where)
    : where_(where) {
  const ModelGraph model = whole_model(spec);
  const TensorTable& whole = model.graph.table;
  const std::vector<int64_t> offsets = whole_offsets(whole);
  for (int id = 0; id < whole.size(); ++id)
    if (whole[id].category == Category::params) {
      by_name_[whole[id].name] = params_.size();
      params_.push_back({whole[id].name, offsets[static_cast<size_t>(id)], whole[id].numel(), {}});
    }
  for (int part = 0; part < layout.parts(); ++part) {
    const int stage = part / layout.tp;
    const int64_t held = add_part(spec, layout, part);
    if (held != layout.num_params[static_cast<size_t>(stage)])
      fail_usage(where + "each tensor-parallel rank of its stage " + std::to_string(stage) + " holds " +
                 std::to_string(layout.num_params[static_cast<size_t>(stage)]) +
                 " parameters, this model's " + std::to_string(held) +
                 " (--model or --make-vocab-size-divisible-by differs)");
  }
}

int64_t SavedParams::add_part(const ModelSpec& spec, const CheckpointLayout& layout, int part) {
  // Only the parameters matter: the smallest step has them all.
  const ModelGraph model = build_model_graph(spec, {.batch = 1,
                                                    .seq_len = 1,
                                                    .tp = layout.tp,
                                                    .tp_rank = part % layout.tp,
                                                    .pp = layout.pp(),
                                                    .pp_rank = part / layout.tp});
  const TensorTable& table = model.graph.table;
  int64_t flat = 0;
  for (int id = 0; id < table.size(); ++id) {
    const TensorDesc& t = table[id];
    if (t.category != Category::params) continue;
    const auto it = by_name_.find(t.name);
    if (it == by_name_.end())
      throw std::logic_error("saved parameters: " + t.name + " is not one of the whole model's");
    params_[it->second].holders.push_back({part, flat, t.shard});
    flat += t.numel();
  }
  return flat;
}

SavedRun SavedParams::locate(const std::string& name, int64_t whole, int64_t limit) const {
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) fail_usage(where_ + "it holds no parameter " + name + " (--model differs)");
  return locate(params_[it->second], whole, limit);
}

SavedRun SavedParams::locate_flat(int64_t flat, int64_t limit) const {
  const auto after = std::upper_bound(params_.begin(), params_.end(), flat,
                                      [](int64_t f, const Param& p) { return f < p.whole_offset; });
  if (after == params_.begin() || flat >= std::prev(after)->whole_offset + std::prev(after)->whole_numel)
    throw std::logic_error("saved parameters: flat element " + std::to_string(flat) + " outside them");
  const Param& p = *std::prev(after);
  return locate(p, flat - p.whole_offset, limit);
}

SavedRun SavedParams::locate(const Param& p, int64_t whole, int64_t limit) const {
  for (const Holder& h : p.holders) {
    if (!h.shard) return {h.part, h.offset + whole, std::min(limit, p.whole_numel - whole)};
    const TensorShard& shard = *h.shard;
    int64_t inner = 1, part_width = 0, before = 0;
    for (size_t d = static_cast<size_t>(shard.dim) + 1; d < shard.whole.size(); ++d) inner *= shard.whole[d];
    for (const auto& range : shard.ranges) part_width += range.second;
    const int64_t across = shard.whole[static_cast<size_t>(shard.dim)] * inner;
    const int64_t outer = whole / across, j = whole % across / inner, r = whole % inner;
    for (const auto& [start, length] : shard.ranges) {
      if (start <= j && j < start + length) {
        const int64_t local = (outer * part_width + before + j - start) * inner + r;
        return {h.part, h.offset + local, std::min(limit, (start + length - j) * inner - r)};
      }
      before += length;
    }
  }
  throw std::logic_error("saved parameters: no part holds element " + std::to_string(whole) + " of " +
                         p.name);
}

}  // namespace mt::ckpt
