// Errors of the CUDA runtime and cuBLASLt as exceptions that name the op (or device operation) that met
// them, and the call: "cuda backend: layernorm_forward: kernel launch: an illegal memory access...".
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace mt::cuda {

inline void check(cudaError_t status, const char* what, const char* call) {
  if (status != cudaSuccess)
    throw std::runtime_error(std::string("cuda backend: ") + what + ": " + call + ": " +
                             cudaGetErrorString(status));
}
inline void check(cublasStatus_t status, const char* what, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cuda backend: ") + what + ": " + call + ": " +
                             cublasLtGetStatusName(status));
}

// After a kernel launch: a bad configuration is reported here, a fault in the kernel at the next
// synchronising call.
inline void check_launch(const char* what) {
  check(cudaGetLastError(), what, "kernel launch");
}

}  // namespace mt::cuda

#define MT_CUDA_CHECK(what, call) ::mt::cuda::check((call), (what), #call)
