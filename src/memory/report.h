// The memory report: planned against measured bytes per category, the activation arena's peak and the
// process's peak resident set, printed as a table and written as memory.json; and the largest tensors of an
// arena with their lifetimes, printed with the plan.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memory/category.h"
#include "memory/plan.h"
#include "memory/tensor_table.h"

namespace mt {

struct MemoryReport {
  CategoryBytes planned;
  CategoryBytes measured;
  int64_t arena_peak_bytes = 0;       // activation arena high-water mark
  int64_t activations_sum_bytes = 0;  // what the activations would take without lifetime packing
  int64_t peak_rss_bytes = 0;
  int64_t num_params = 0;       // elements of the parameter buffers, for bytes per parameter
  int64_t offloaded_bytes = 0;  // master weights and moments in the offload file: disk, not memory
  // The parts of planned and measured in host memory (MemorySpace::host: staging the host fills or reads).
  CategoryBytes planned_host = {}, measured_host = {};
};

// Weights + master + gradients + optimizer states, per parameter element.
double model_state_bytes_per_param(const CategoryBytes& bytes, int64_t num_params);

// The process's peak resident set size (VmHWM), or 0 where /proc is unavailable.
int64_t peak_rss_bytes();

// "1.50 GiB", "12.0 MiB", "512 B".
std::string human_bytes(int64_t bytes);
// "124,439,808"; negative numbers keep their sign.
std::string with_commas(int64_t n);

// "trainable parameters 8,192 of 506,880 (1.62%)": a run with frozen weights (LoRA) says what it trains.
std::string format_trainable(int64_t trainable, int64_t all);

std::string format_memory_report(const MemoryReport& report);

// The n largest tensors of an arena's category (largest first, as packed): name, shape, dtype, bytes, the ops
// of their lifetime by index and name (op_names: one per op), and their offset in the arena.
std::string format_largest_tensors(const TensorTable& table, const ArenaLayout& layout, Category category,
                                   int n, const std::vector<std::string>& op_names);

// {"planned": {category: bytes}, "measured": {...}, "planned_host": {...}, "measured_host": {...},
// "arena_peak_bytes": n, "peak_rss_bytes": n, ...}
nlohmann::json memory_report_json(const MemoryReport& report);

}  // namespace mt
