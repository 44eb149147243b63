// Saving a checkpoint, atomically and durably: every file goes into a temporary directory and is fsynced,
// the manifest follows last, and only then is the directory renamed into place. A crash at any moment
// leaves the previous checkpoints intact and at most a temporary directory, which the next save removes.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "ckpt/state.h"
#include "dist/communicator.h"
#include "memory/allocation.h"
#include "model/hf_tensors.h"

namespace mt::ckpt {

// Collective: every rank calls it with the same state. Each rank streams its save range of the model states
// from `memory` (no copy) into its rank file (the world rank's, state.layout.file_range) and its part of
// model.safetensors, whose tensors `tensors` are (in the order of state.layout.tensors, each naming this
// rank's parameter, or none where another stage writes it: held_tensors); rank 0 checksums
// model.safetensors through `stream` (the plan's checkpoint buffer), adds state.json and the manifest,
// renames, then keeps the newest `keep` checkpoints of the state's lineage (its run_id; 0: all), never
// touching another run's. Returns the checkpoint's directory.
std::string save_checkpoint(const std::string& save_dir, const CheckpointState& state,
                            const Allocation& memory, const std::vector<FileTensor>& tensors,
                            Communicator& comm, int keep, std::span<char> stream);

// For a requeued run that finds its last step saved, whose save a kill may have cut off after its rename:
// removes unfinished saves' hidden directories (as a save does first) and keeps the newest `keep`
// checkpoints of lineage `run_id` (0: all; as a save does last). Rank 0's, not collective.
void tidy_save_dir(const std::string& save_dir, const std::string& run_id, int keep);

// Removes every checkpoint of save_dir (--overwrite-checkpoints); returns how many there were.
size_t remove_checkpoints(const std::string& save_dir);

}  // namespace mt::ckpt
