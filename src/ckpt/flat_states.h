// The model states a checkpoint stores, as ranges of the flat parameters (the Plan's numbering): the
// weights, the fp32 master copy and Adam's moments, each held by this rank over its own range (all of it, or
// its ZeRO shard), and the rank files that hold them on disk. Resharding is range intersection: any rank
// reads the overlap of its ranges with each saved rank's range.
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

struct FlatBuffer {
  std::string name;  // "weights", "master", "adam_m", "adam_v": the tensor name in the rank files
  char* data;        // element i is flat parameter begin + i
  DType dtype;
  FlatRange range;
};

// This rank's model-state buffers, as its Plan lays them out (no master without master weights).
std::vector<FlatBuffer> flat_buffers(const Allocation& memory);

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
