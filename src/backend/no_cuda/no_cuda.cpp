// The GPU side of a build without CUDA (MEMTRAIN_CUDA off): it knows no GPU.
#include "backend/gpu.h"
#include "core/error.h"

namespace mt {

void refuse_gpu(const std::string& where) {
  fail_usage(where + ": this memtrain was built without CUDA");
}

}  // namespace mt
