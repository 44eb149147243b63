// The memory timeline of one training step: the bytes held per category while each op runs. `train
// --memory-timeline` records it (JSON, or CSV for people with a spreadsheet) and `memtrain report` reads the
// JSON back to draw it.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "memory/category.h"

namespace mt {

struct TimelinePoint {
  int op = 0;
  std::string name;    // the op's name in the graph
  CategoryBytes live;  // held while the op runs: its inputs, outputs and scratch are all bound
};

struct MemoryTimeline {
  std::string run;                    // "gpt2-tiny | B=2 T=32 | fp32": what the picture's title says
  int loss_op = -1;                   // the op computing the loss: forward before it, backward after
  CategoryBytes planned;              // what the allocation reserves (arenas at their packed sizes)
  std::vector<TimelinePoint> points;  // one per op, in op order

  // Index of the point holding the most bytes in total (the first of equals); -1 without points.
  int peak_point() const;
};

// {"run": ..., "loss_op": n, "planned": {category: bytes}, "points": [{"op", "name", "bytes": {category:
// bytes}}]} with category keys from category_key(), one point per line so that the file reads as a table.
std::string memory_timeline_json(const MemoryTimeline& timeline);
// Throws nlohmann::json::exception when a field is missing or of the wrong type.
MemoryTimeline memory_timeline_from_json(const nlohmann::json& json);

// One row per op: op,name,<category keys...>,total.
std::string memory_timeline_csv(const MemoryTimeline& timeline);

// Reads memory_timeline_json's output; a missing or malformed file is a data error naming the path.
MemoryTimeline read_memory_timeline(const std::string& path);

}  // namespace mt
