// cuBLASLt, loaded when the first product or handle asks for it rather than with the binary. Linked, its
// library (hundreds of MB) is mapped and initialised by every memtrain process, GPU or not: `estimate` of
// LLaMA-2 70B went from under 64 MiB resident to 220 MiB. So the binary does not link it: these are the
// cuBLASLt functions the backend calls, each forwarding to the library's own, found with dlopen (the
// toolkit's soname, else the toolkit this build was made with) on the first call.
#include <cublasLt.h>
#include <dlfcn.h>

#include <stdexcept>
#include <string>

namespace {

void* cublaslt_library() {
  static void* const library = [] {
    for (const char* name : {"libcublasLt.so." MEMTRAIN_CUBLASLT_SOVERSION, MEMTRAIN_CUBLASLT_PATH})
      if (void* handle = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return handle;
    throw std::runtime_error(
        std::string("cuda backend: cannot load cuBLASLt (libcublasLt.so." MEMTRAIN_CUBLASLT_SOVERSION "): ") +
        dlerror());
  }();
  return library;
}

template <typename Function>
Function cublaslt_function(const char* name) {
  void* const function = dlsym(cublaslt_library(), name);
  if (!function) throw std::runtime_error(std::string("cuda backend: cuBLASLt has no ") + name);
  return reinterpret_cast<Function>(function);
}

}  // namespace

// The declaration's parameters and the names to pass them on by.
#define MT_CUBLASLT(Result, name, parameters, arguments)                                    \
  extern "C" Result CUBLASWINAPI name parameters {                                          \
    static const auto forward = cublaslt_function<Result(CUBLASWINAPI*) parameters>(#name); \
    return forward arguments;                                                               \
  }

MT_CUBLASLT(cublasStatus_t, cublasLtCreate, (cublasLtHandle_t * handle), (handle))
MT_CUBLASLT(cublasStatus_t, cublasLtDestroy, (cublasLtHandle_t handle), (handle))
MT_CUBLASLT(const char*, cublasLtGetStatusName, (cublasStatus_t status), (status))
MT_CUBLASLT(cublasStatus_t, cublasLtMatmul,
            (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
             cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc, const void* beta,
             const void* C, cublasLtMatrixLayout_t Cdesc, void* D, cublasLtMatrixLayout_t Ddesc,
             const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes, cudaStream_t stream),
            (handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo, workspace,
             workspace_bytes, stream))
MT_CUBLASLT(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,
            (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
             cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
             cublasLtMatmulPreference_t preference, int requested, cublasLtMatmulHeuristicResult_t results[],
             int* returned),
            (handle, desc, Adesc, Bdesc, Cdesc, Ddesc, preference, requested, results, returned))
MT_CUBLASLT(cublasStatus_t, cublasLtMatmulDescCreate,
            (cublasLtMatmulDesc_t * desc, cublasComputeType_t compute, cudaDataType_t scale),
            (desc, compute, scale))
MT_CUBLASLT(cublasStatus_t, cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))
MT_CUBLASLT(cublasStatus_t, cublasLtMatmulDescSetAttribute,
            (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const void* buf, size_t bytes),
            (desc, attr, buf, bytes))
MT_CUBLASLT(cublasStatus_t, cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * preference),
            (preference))
MT_CUBLASLT(cublasStatus_t, cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t preference),
            (preference))
MT_CUBLASLT(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,
            (cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attr,
             const void* buf, size_t bytes),
            (preference, attr, buf, bytes))
MT_CUBLASLT(cublasStatus_t, cublasLtMatrixLayoutCreate,
            (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),
            (layout, type, rows, cols, ld))
MT_CUBLASLT(cublasStatus_t, cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))
