// Argmax per row: each thread scans a strided slice, then a shuffle reduction per warp and one over the
// warps' winners. Ties go to the lower index, so the result matches a left-to-right scan.
#include "gpu/cuda/argmax.cuh"

#include "gpu/cuda/device.cuh"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

constexpr int threads = 512;

/// True when (v, i) beats (best, best_i): larger, or equal with a lower index.
__device__ __forceinline__ bool beats(float v, int i, float best, int best_i) {
  return v > best || (v == best && i < best_i);
}

__device__ __forceinline__ void warp_argmax(float& best, int& best_i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(full_mask, best, o);
    const int i = __shfl_xor_sync(full_mask, best_i, o);
    if (beats(v, i, best, best_i)) {
      best = v;
      best_i = i;
    }
  }
}

__global__ void __launch_bounds__(threads) argmax_kernel(const float* logits, size_t ld, int vocab, int32_t* out) {
  __shared__ float values[threads / 32];
  __shared__ int indices[threads / 32];
  const float* row = logits + size_t(blockIdx.x) * ld;
  float best = -INFINITY;
  int best_i = vocab;  // beaten by any real entry but NaN
  for (int i = int(threadIdx.x); i < vocab; i += threads)
    if (beats(row[i], i, best, best_i)) {
      best = row[i];
      best_i = i;
    }
  warp_argmax(best, best_i);
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  if (lane == 0) {
    values[warp] = best;
    indices[warp] = best_i;
  }
  __syncthreads();
  if (warp == 0) {
    best = lane < threads / 32 ? values[lane] : -INFINITY;
    best_i = lane < threads / 32 ? indices[lane] : vocab;
    warp_argmax(best, best_i);
    if (lane == 0) out[blockIdx.x] = best_i < vocab ? best_i : 0;  // all NaN: 0, as gpu::argmax
  }
}

}  // namespace

cudaError_t argmax_rows(const float* logits, size_t ld, int n, int vocab, int32_t* out, cudaStream_t stream) {
  return launch(argmax_kernel, dim3(unsigned(n)), dim3(threads), 0, stream, logits, ld, vocab, out);
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
