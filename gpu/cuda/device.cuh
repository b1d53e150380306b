#pragma once
// Device helpers shared by the kernels of gpu/cuda: the element types of weights and KV blocks, warp
// and block reductions, and `launch` (a <<<>>> launch whose error is returned; under the CPU emulation
// used by the tests, the emulator's launch). Included by .cu files only.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "gpu/cuda/abi.hpp"

/// Declares the block's dynamic shared memory as `unsigned char name[]`, 16-byte aligned.
#if ILLM_CUDA_EMULATION
#define ILLM_DYNAMIC_SHARED(name) unsigned char* name = emu_dynamic_shared()
#else
#define ILLM_DYNAMIC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

inline constexpr unsigned full_mask = 0xffffffffu;
inline constexpr float log2e = 1.4426950408889634f;
inline constexpr float ln2 = 0.6931471805599453f;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

/// Rounds to nearest even into T.
template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

__device__ __forceinline__ int imin(int a, int b) { return a < b ? a : b; }
__device__ __forceinline__ int imax(int a, int b) { return a > b ? a : b; }

/// Sum over the `width` lanes (a power of two <= 32) of each aligned group; every lane gets it.
template <int Width = 32>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = Width / 2; o > 0; o >>= 1) v += __shfl_xor_sync(full_mask, v, o);
  return v;
}

/// Maximum over the `width` lanes of each aligned group; every lane gets it.
template <int Width = 32>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int o = Width / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(full_mask, v, o));
  return v;
}

/// Sum over the whole block (blockDim.x a multiple of 32); every thread gets the total. Every thread
/// of the block must call it.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5, warps = int(blockDim.x) >> 5;
  v = group_sum(v);
  __syncthreads();  // an earlier call may still be reading `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float total = lane < warps ? partial[lane] : 0.0f;
  return group_sum(total);
}

/// Launches `kernel` on `stream` (nothing for an empty grid) and returns the launch error.
template <class... Params, class... Args>
cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   Args&&... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
#if ILLM_CUDA_EMULATION
  return emu_launch(kernel, grid, block, shared_bytes, stream, Params(std::forward<Args>(args))...);
#else
  kernel<<<grid, block, shared_bytes, stream>>>(Params(std::forward<Args>(args))...);
  return cudaGetLastError();
#endif
}

/// Allows `kernel` up to `bytes` of dynamic shared memory (needed above 48 KiB).
template <class... Params>
cudaError_t allow_shared(void (*kernel)(Params...), size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                              int(bytes));
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
