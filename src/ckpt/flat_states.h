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

// One optimizer-state tensor of the rank files ("master", "adam_m", "adam_v") and where a window holds it.
struct StateTensor {
  std::string name;
  DType dtype;
  char* (*in_window)(const StateWindow& window);
};
// The policy's optimizer-state tensors: master (when there are master weights), adam_m, adam_v.
std::vector<StateTensor> state_tensors(const Plan& plan);

// The rank files of one checkpoint, open for reading.
class RankFiles {
 public:
  RankFiles(const std::string& checkpoint_dir, const CheckpointLayout& layout);
  // Reads flat elements [range.begin, range.end) of tensor `name` (dtype as stored) into dst from every rank
  // file that overlaps them.
  void read(const std::string& name, DType dtype, FlatRange range, char* dst) const;

 private:
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::vector<FlatRange> ranges_;
};

}  // namespace mt::ckpt
