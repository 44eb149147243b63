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

SavedParams::SavedParams(const ModelSpec& spec, int tp, int64_t num_params, const std::string& where)
    : where_(where) {
  for (int s = 0; s < tp; ++s) {
    // Only the parameters matter: the smallest step has them all.
    const ModelGraph model =
        build_model_graph(spec, {.batch = 1, .seq_len = 1, .threads = 1, .tp = tp, .tp_rank = s});
    const TensorTable& table = model.graph.table;
    const std::vector<int64_t> whole = whole_offsets(table);
    int64_t flat = 0;
    size_t index = 0;
    for (int id = 0; id < table.size(); ++id) {
      const TensorDesc& t = table[id];
      if (t.category != Category::params) continue;
      if (s == 0) {
        by_name_[t.name] = params_.size();
        params_.push_back({t.name, whole[static_cast<size_t>(id)], t.whole_numel(), {}, {}});
      }
      Param& p = params_.at(index++);
      p.offsets.push_back(flat);
      p.shards.push_back(t.shard);
      flat += t.numel();
    }
    if (flat != num_params)
      fail_usage(where + "each of its " + std::to_string(tp) + " tensor-parallel ranks holds " +
                 std::to_string(num_params) + " parameters, this model's " + std::to_string(flat) +
                 " (--model or --make-vocab-size-divisible-by differs)");
  }
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
  if (!p.shards[0]) return {0, p.offsets[0] + whole, std::min(limit, p.whole_numel - whole)};
  for (size_t s = 0; s < p.shards.size(); ++s) {
    const TensorShard& shard = *p.shards[s];
    int64_t inner = 1, part_width = 0, before = 0;
    for (size_t d = static_cast<size_t>(shard.dim) + 1; d < shard.whole.size(); ++d) inner *= shard.whole[d];
    for (const auto& range : shard.ranges) part_width += range.second;
    const int64_t across = shard.whole[static_cast<size_t>(shard.dim)] * inner;
    const int64_t outer = whole / across, j = whole % across / inner, r = whole % inner;
    for (const auto& [start, length] : shard.ranges) {
      if (start <= j && j < start + length) {
        const int64_t local = (outer * part_width + before + j - start) * inner + r;
        return {static_cast<int>(s), p.offsets[s] + local, std::min(limit, (start + length - j) * inner - r)};
      }
      before += length;
    }
  }
  throw std::logic_error("saved parameters: no rank holds element " + std::to_string(whole) + " of " +
                         p.name);
}

}  // namespace mt::ckpt
