// Whether this build can train on an NVIDIA GPU. A build without CUDA (MEMTRAIN_CUDA off) links
// backend/no_cuda/, which knows no GPU; one with it links backend/cuda/, which finds the GPUs through the
// CUDA runtime. Neither trains on one yet: the CUDA backend is the next step (docs/architecture.md, "Adding a
// device").
#pragma once

#include <string>

namespace mt {

// A usage error for `where` (the flag and its value), saying why this build cannot train on a GPU.
[[noreturn]] void refuse_gpu(const std::string& where);

}  // namespace mt
