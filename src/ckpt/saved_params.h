// Where a checkpoint's tensor-parallel ranks held each element of the whole parameters: their graphs built
// again from the model, with each rank's parts and flat numbering. A load under another
// --tensor-model-parallel-size reads every element from the saved rank that held it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "memory/tensor_table.h"
#include "model/spec.h"

namespace mt::ckpt {

// Flat parameters [flat, flat + count) of saved tensor-parallel rank tp_rank.
struct SavedRun {
  int tp_rank = 0;
  int64_t flat = 0, count = 0;
};

// Each parameter's first element in one process's flat numbering, where every parameter is whole, in the
// table's order (CheckpointTensor::offset); -1 for the other tensors.
std::vector<int64_t> whole_offsets(const TensorTable& table);

class SavedParams {
 public:
  // The parameters of `spec` split over `tp` ranks. The checkpoint's `num_params` (of each rank) must be
  // theirs: a usage error, `where` first, otherwise.
  SavedParams(const ModelSpec& spec, int tp, int64_t num_params, const std::string& where);
  // The saved elements of parameter `name` from element `whole` of its whole tensor on, at most `limit`,
  // that follow each other on one rank. A usage error, `where` first, when no parameter has that name.
  SavedRun locate(const std::string& name, int64_t whole, int64_t limit) const;
  // The same from element `flat` of one process's flat numbering (CheckpointTensor::offset).
  SavedRun locate_flat(int64_t flat, int64_t limit) const;

 private:
  struct Param {
    std::string name;
    int64_t whole_offset = 0, whole_numel = 0;  // in one process's flat numbering
    std::vector<int64_t> offsets;               // per rank, in its flat numbering
    std::vector<std::optional<TensorShard>> shards;
  };
  SavedRun locate(const Param& p, int64_t whole, int64_t limit) const;

  std::string where_;
  std::vector<Param> params_;  // in flat order
  std::map<std::string, size_t> by_name_;
};

}  // namespace mt::ckpt
