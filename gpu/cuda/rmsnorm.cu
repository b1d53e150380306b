// RMSNorm: the block sums the row's squares, then each thread scales the elements it read. A row is a whole
// token row, or one head of it (a row of `heads` rows of n).
#include "gpu/cuda/rmsnorm.cuh"

#include "gpu/cuda/device.cuh"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

constexpr int threads = 256;

__global__ void __launch_bounds__(threads) rmsnorm_kernel(const float* x, size_t ldx, const float* weight, int n,
                                                          int heads, float eps, float* y, size_t ldy) {
  const size_t token = blockIdx.x / unsigned(heads), head = blockIdx.x % unsigned(heads);
  const float* row = x + token * ldx + head * size_t(n);
  float squares = 0.0f;
  for (int i = int(threadIdx.x); i < n; i += threads) squares += row[i] * row[i];
  // Every element is read above before any is written below (block_sum is a barrier): y may be x.
  const float inv = 1.0f / sqrtf(block_sum(squares) / float(n) + eps);
  float* out = y + token * ldy + head * size_t(n);
  for (int i = int(threadIdx.x); i < n; i += threads) out[i] = row[i] * inv * weight[i];
}

}  // namespace

cudaError_t rmsnorm(const float* x, size_t ldx, const float* weight, int m, int n, float eps, float* y, size_t ldy,
                    cudaStream_t stream) {
  return launch(rmsnorm_kernel, dim3(unsigned(m)), dim3(threads), 0, stream, x, ldx, weight, n, 1, eps, y, ldy);
}

cudaError_t head_rmsnorm(float* x, size_t ld, int m, int n_heads, int head_dim, const float* weight, float eps,
                         cudaStream_t stream) {
  return launch(rmsnorm_kernel, dim3(unsigned(m) * unsigned(n_heads)), dim3(threads), 0, stream, x, ld, weight,
                head_dim, n_heads, eps, x, ld);
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
