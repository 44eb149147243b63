// Resuming: finding the checkpoint to load (the newest one whose manifest verifies, skipping and reporting
// corrupt or partial ones) and reading this rank's model states from it, on any world size and ZeRO stage.
#pragma once

#include <span>
#include <string>

#include "ckpt/state.h"
#include "memory/allocation.h"
#include "model/spec.h"

namespace mt::ckpt {

// `dir` is one checkpoint's directory (it must verify: a data error names the bad file otherwise) or a save
// directory, whose newest verifying checkpoint is chosen; each one skipped is reported on stderr. Returns
// the chosen directory, or "" when a save directory holds none that verifies: a data error naming `flag`
// unless `fresh_if_none` (also for a path that does not exist). Files are read through `buffer`.
std::string select_checkpoint(const std::string& dir, const std::string& flag, bool fresh_if_none,
                              std::span<char> buffer);

// Reads every model-state buffer of this rank (its ranges under its own Plan) from the checkpoint's rank
// files. Saved under the same tensor- and pipeline-parallel sizes, they are ranges of this rank's model
// part's files; under others, each element of `spec`'s whole parameters comes from a saved part that held it
// (except 8-bit moments' block scales: a usage error). The stored dtypes and parameter count must match this
// run's: a usage error says which differs.
void load_model_states(const std::string& checkpoint_dir, const CheckpointState& state, Allocation& memory,
                       const ModelSpec& spec, const ModelPart& part);

}  // namespace mt::ckpt
