// The optimizer state offloaded to a file (--offload-optimizer nvme): this rank's master weights and Adam
// moments (with their scales when blocked) live in OFFLOAD_PATH/memtrain-optimizer.rank{r}.bin (created
// empty, so the moments start at zero, and removed when the state is destroyed). A visit streams the range
// through two chunk slots per state: while the caller works on one chunk, an I/O thread writes the previous
// chunk back and reads the next one.
#pragma once

#include <string>

#include "memory/optimizer_state.h"

namespace mt {

class OffloadedOptimizerState : public OptimizerState {
 public:
  // `slots`: kOffloadSlots chunk slots of plan.offload.chunk_elems elements each (and their scales). A
  // missing or unwritable --offload-path is a data error naming it.
  OffloadedOptimizerState(const Plan& plan, const StateBuffers& slots);
  ~OffloadedOptimizerState() override;
  OffloadedOptimizerState(const OffloadedOptimizerState&) = delete;
  OffloadedOptimizerState& operator=(const OffloadedOptimizerState&) = delete;

  void visit(int64_t begin, int64_t end, StateAccess access, const Visitor& visit) override;
  const std::string& file() const { return file_; }

 private:
  enum class Direction { read, write };
  // Moves the parts `access` touches of the chunk [begin, end) between the file and a slot.
  void transfer(Direction direction, StateAccess access, int64_t begin, int64_t end, int slot);
  StateWindow window(int64_t begin, int64_t end, int slot) const;

  const Plan& plan_;
  StateBuffers slots_;
  int64_t moment_size_;
  std::string file_;
  int fd_ = -1;
};

}  // namespace mt
