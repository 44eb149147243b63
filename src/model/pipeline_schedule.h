// Megatron's 1F1B schedule of a pipeline stage (PipeDream-Flush): a warm-up of forwards, then one forward and
// one backward in turn, then a cool-down of backwards. A stage keeps at most (stages - stage) micro-batches'
// activations at once, however many micro-batches the step has.
#pragma once

#include <cstdint>
#include <vector>

namespace mt {

struct PipelinePass {
  bool forward = true;  // else the micro-batch's backward
  int64_t micro_batch = 0;
};

// The passes of stage `stage` of `stages` over a step of `micro_batches`, in the order it runs them.
std::vector<PipelinePass> one_f_one_b(int stages, int stage, int64_t micro_batches);

// The micro-batches whose activations a stage holds at most at once under 1F1B.
int64_t micro_batches_in_flight(int stages, int stage, int64_t micro_batches);

// The part of a step the stages idle while the pipeline fills and drains: (P - 1) / (m + P - 1).
double pipeline_bubble_fraction(int stages, int64_t micro_batches);

}  // namespace mt
