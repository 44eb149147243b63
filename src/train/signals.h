// SIGINT and SIGTERM during training ask the run to stop after the step in progress (saving a checkpoint)
// instead of killing it mid-step. Before the first step (planning, the OOM doctor, allocating, loading) there
// is nothing to save, so a signal ends the process at once, as does a second signal at any time (exit status
// 128 + signal). A first signal during a step says so at once on stderr, with the step's progress.
#pragma once

#include <cstdint>

namespace mt {

// Call before the run starts any thread: the signals are blocked in this thread and every thread it starts
// later, and a watcher thread takes them. A handler interrupting compute threads is what this avoids: a
// signal frame pushed onto the stack of oneDNN's JIT kernels was seen to corrupt the heap.
void catch_stop_signals();
// From now on a first signal asks the run to stop after its step instead of ending the process; `warning`
// (constant text, one line), when given, goes to stderr at once when it does.
void begin_steps(const char* warning = nullptr);
bool stop_requested();
// The signal that asked the run to stop; 0 while none has.
int stop_signal();
// Where the step in progress is (micro_batch counts from 1), for what a first signal says at once.
void report_step_progress(int64_t step, int64_t micro_batch, int64_t micro_batches);

}  // namespace mt
