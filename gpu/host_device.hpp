#pragma once
// ILLM_HOST_DEVICE marks the small functions that the cpu kernels and the CUDA kernels share.

#if defined(__CUDACC__)
#define ILLM_HOST_DEVICE __host__ __device__
#else
#define ILLM_HOST_DEVICE
#endif
