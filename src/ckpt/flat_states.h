// The model states a checkpoint stores, as ranges of the flat parameters (the Plan's numbering): the
// weights this rank holds (all of them, or its ZeRO-3 shard), and the optimizer state of its shard (fp32
// master weights and Adam's moments, in memory or offloaded, reached through OptimizerState windows). Also
// the rank files that hold them on disk. Resharding is range intersection: any rank reads the overlap of its
// ranges with each saved rank's range.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/layout.h"
#include "ckpt/state.h"
#include "io/safetensors.h"
#include "memory/allocation.h"

namespace mt::ckpt {

// The rank files' tensor of the weights.
inline constexpr const char* kWeightsTensor = "weights";

// This rank's weight buffer: element i is flat parameter range.begin + i.
struct HeldWeights {
  char* data;
  DType dtype;
  FlatRange range;
};
HeldWeights held_weights(const Allocation& memory);

// One optimizer-state tensor of the rank files ("master", "adam_m", "adam_v", "adam_m_scales",
// "adam_v_scales") and where a window holds it. A scale stands for a block of `per` flat parameters, the
// other tensors' entries for one each.
struct StateTensor {
  std::string name;
  DType dtype;
  char* (*in_window)(const StateWindow& window);
  int64_t per = 1;

  // The entries of flat range [begin, end), begin a block's start: one per block begun.
  int64_t entries(int64_t begin, int64_t end) const { return ceil_div(end, per) - begin / per; }
  int64_t bytes(int64_t begin, int64_t end) const {
    return entries(begin, end) * static_cast<int64_t>(dtype_size(dtype));
  }
};
// The policy's optimizer-state tensors: master (when there are master weights), adam_m, adam_v (not under
// Adam-mini), and the moments' scales when they are blocked (stored as they are: a resume never requantizes).
std::vector<StateTensor> state_tensors(const Plan& plan);

// Adam-mini's second moments (ModelStatePolicy::v_blocks of them, fp32): one per block, not per flat
// parameter, and held whole by every rank, so rank 0's file holds them all under this name.
inline constexpr const char* kAdamMiniVTensor = "adam_mini_v";
// Fills it from rank 0's file of `checkpoint_dir`, which must hold plan.policy.v_blocks finite values.
void read_adam_mini_v(const std::string& checkpoint_dir, Allocation& memory);

// The rank files of one model part of a checkpoint (ModelPart::index; all of them without model
// parallelism), open for reading.
class RankFiles {
 public:
  RankFiles(const std::string& checkpoint_dir, const CheckpointLayout& layout, int part = 0);
  // Reads tensor t's entries of flat elements [range.begin, range.end) (of the part's numbering) into dst
  // from every rank file that overlaps them.
  void read(const StateTensor& t, FlatRange range, char* dst) const;

 private:
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::vector<FlatRange> ranges_;
};

}  // namespace mt::ckpt
