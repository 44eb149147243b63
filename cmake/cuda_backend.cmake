# The CUDA backend (src/backend/cuda/): its kernels for sm_80 and sm_90 (A100, H100/H200) unless
# CMAKE_CUDA_ARCHITECTURES says otherwise, cuBLASLt for the products. Built without fast math and without
# contracting a*b+c into an FMA (--fmad=false): the element-wise math it shares with the CPU (core/half.h,
# core/adamw_element.h, ...) then computes the same bits on both, and every FMA is one the code writes.
find_package(CUDAToolkit REQUIRED)
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 80 90)
endif()
if(NOT DEFINED CMAKE_CUDA_COMPILER)
  set(CMAKE_CUDA_COMPILER ${CUDAToolkit_NVCC_EXECUTABLE})
endif()
enable_language(CUDA)
# The rooms the backend links ask for C++20 (compile features), which CMake 3.25 cannot spell for nvcc 13.
set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION -std=c++20)
set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION -std=c++20)
set(CMAKE_CUDA_STANDARD 20)

file(GLOB MEMTRAIN_CUDA_SOURCES CONFIGURE_DEPENDS src/backend/cuda/*.cu src/backend/cuda/*.cpp)
add_library(memtrain_backend_cuda STATIC ${MEMTRAIN_CUDA_SOURCES})
target_include_directories(memtrain_backend_cuda PUBLIC src)
target_compile_options(memtrain_backend_cuda PRIVATE
  "$<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr;--fmad=false;-Xcompiler=-Wall,-Wextra>")
if(MEMTRAIN_WERROR)
  target_compile_options(memtrain_backend_cuda PRIVATE
    "$<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings;-Xcompiler=-Werror>")
endif()
# The static runtime: the binary needs no libcudart beside it, and runs without a driver (finding no GPU).
# cuBLASLt is not linked but loaded on first use (cublaslt_loader.cpp), by its soname, else from this toolkit;
# its headers are the toolkit's. The backend also uses the CPU backend's 8-bit moments' dynamic maps (shared
# tables), which memtrain_lib links whole beside it.
string(REGEX MATCH "^[0-9]+" MEMTRAIN_CUBLASLT_SOVERSION "${CUDAToolkit_VERSION}")
set_property(SOURCE src/backend/cuda/cublaslt_loader.cpp APPEND PROPERTY COMPILE_DEFINITIONS
             MEMTRAIN_CUBLASLT_SOVERSION="${MEMTRAIN_CUBLASLT_SOVERSION}"
             MEMTRAIN_CUBLASLT_PATH="${CUDAToolkit_LIBRARY_DIR}/libcublasLt.so.${MEMTRAIN_CUBLASLT_SOVERSION}")
target_include_directories(memtrain_backend_cuda PUBLIC ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(memtrain_backend_cuda PUBLIC memtrain_base CUDA::cudart_static ${CMAKE_DL_LIBS})
