// The OOM doctor: before `memtrain train` allocates anything, its plan is compared with --memory-limit (by
// default the memory this machine has available, shared by its ranks). A plan that does not fit is refused
// with its breakdown and the cheapest changes of flags that make it fit, ranked by the cost model, each with
// its predicted step time against the refused run's (8-bit moments cost AdamW time, bf16 saves time).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/train_config.h"
#include "layout/run_layout.h"

namespace mt {

// MemAvailable from /proc/meminfo in bytes; 0 where it cannot be read.
int64_t available_memory_bytes();

struct FitChange {
  std::string flags;  // "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16", "--recompute-granularity full
                      // --recompute-method block ..."
  int64_t bytes = 0;  // the changed run's total per rank
  double step_s = 0;  // its predicted step time (the shipped profile of this process's level and threads)
};

// Changes of one flag group (or, when none suffices, two) after which every rank of `world` fits in `limit`
// bytes, fastest first.
std::vector<FitChange> changes_that_fit(const TrainConfig& config, int world, int64_t limit);

// Throws mt::Error(no_fit) after printing the plan and the changes that fit when the plan of the rank that
// holds the most (evaluate_candidate's: each pipeline stage's largest shard) exceeds the limit; every rank
// reaches the same verdict. Plans as `train` does: at this process's ISA level, rank_threads per rank. For
// --device cuda: the GPU's plan (its device part) against the GPU's free memory, or --memory-limit.
void check_memory_fit(const TrainConfig& config, int world);

}  // namespace mt
