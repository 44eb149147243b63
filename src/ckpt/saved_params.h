// Where a checkpoint's model parts (ModelPart: a pipeline stage's tensor-parallel rank) held each element of
// the whole parameters: their graphs built again from the model, with each part's parameters and flat
// numbering. A load under another --tensor-model-parallel-size or --pipeline-model-parallel-size reads every
// element from a saved part that held it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/state.h"
#include "memory/tensor_table.h"
#include "model/spec.h"

namespace mt::ckpt {

// Flat parameters [flat, flat + count) of saved model part `part` (ModelPart::index).
struct SavedRun {
  int part = 0;
  int64_t flat = 0, count = 0;
};

// Each parameter's first element in one process's flat numbering, where every parameter is whole, in the
// table's order (CheckpointTensor::offset); -1 for the other tensors.
std::vector<int64_t> whole_offsets(const TensorTable& table);

class SavedParams {
 public:
  // The parameters of `spec` split over `layout`'s stages and tensor-parallel ranks. Its parameter counts
  // (of each part) must be theirs: a usage error, `where` first, otherwise.
  SavedParams(const ModelSpec& spec, const CheckpointLayout& layout, const std::string& where);
  // The saved elements of parameter `name` from element `whole` of its whole tensor on, at most `limit`,
  // that follow each other in one part. A usage error, `where` first, when no parameter has that name.
  SavedRun locate(const std::string& name, int64_t whole, int64_t limit) const;
  // The same from element `flat` of one process's flat numbering (CheckpointTensor::offset).
  SavedRun locate_flat(int64_t flat, int64_t limit) const;

 private:
  // A part that holds a parameter (or, split, its piece): the first element in the part's flat numbering.
  struct Holder {
    int part = 0;
    int64_t offset = 0;
    std::optional<TensorShard> shard;
  };
  struct Param {
    std::string name;
    int64_t whole_offset = 0, whole_numel = 0;  // in one process's flat numbering
    std::vector<Holder> holders;                // in part order; a tied embedding's copy after the first
  };
  SavedRun locate(const Param& p, int64_t whole, int64_t limit) const;
  // Adds the parameters of part `part` of `layout`; returns their count.
  int64_t add_part(const ModelSpec& spec, const CheckpointLayout& layout, int part);

  std::string where_;
  std::vector<Param> params_;  // in flat order
  std::map<std::string, size_t> by_name_;
};

}  // namespace mt::ckpt
