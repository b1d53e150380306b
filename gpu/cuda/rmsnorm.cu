// RMSNorm: the block sums the row's squares, then each thread scales the elements it read.
#include "gpu/cuda/rmsnorm.cuh"

#include "gpu/cuda/device.cuh"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

constexpr int threads = 256;

__global__ void __launch_bounds__(threads) rmsnorm_kernel(const float* x, size_t ldx, const float* weight, int n,
                                                          float eps, float* y, size_t ldy) {
  const float* row = x + size_t(blockIdx.x) * ldx;
  float squares = 0.0f;
  for (int i = int(threadIdx.x); i < n; i += threads) squares += row[i] * row[i];
  // Every element is read above before any is written below (block_sum is a barrier): y may be x.
  const float inv = 1.0f / sqrtf(block_sum(squares) / float(n) + eps);
  float* out = y + size_t(blockIdx.x) * ldy;
  for (int i = int(threadIdx.x); i < n; i += threads) out[i] = row[i] * inv * weight[i];
}

}  // namespace

cudaError_t rmsnorm(const float* x, size_t ldx, const float* weight, int m, int n, float eps, float* y, size_t ldy,
                    cudaStream_t stream) {
  return launch(rmsnorm_kernel, dim3(unsigned(m)), dim3(threads), 0, stream, x, ldx, weight, n, eps, y, ldy);
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
