// MT_HOST_DEVICE marks the element-wise math both backends run (conversions, roundings, the optimizer's
// per-element step, counter-based random bits): the CUDA compiler builds it for the host and the GPU, so
// that both compute the same bits; every other compiler sees a plain function.
#pragma once

#if defined(__CUDACC__)
#define MT_HOST_DEVICE __host__ __device__
#else
#define MT_HOST_DEVICE
#endif
