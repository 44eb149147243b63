// SIGINT and SIGTERM during training ask the run to stop after the step in progress (saving a checkpoint)
// instead of killing it mid-step. A second signal acts as usual and kills the process.
#pragma once

namespace mt {

void catch_stop_signals();
bool stop_requested();

}  // namespace mt
