// A projection's bias, one thread per element.
#include "gpu/cuda/add_bias.cuh"

#include "gpu/cuda/device.cuh"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

constexpr int threads = 256;

__global__ void __launch_bounds__(threads) add_bias_kernel(float* x, size_t ld, int m, int n, const float* bias) {
  const int64_t i = int64_t(blockIdx.x) * threads + threadIdx.x;
  if (i >= int64_t(m) * n) return;
  const size_t row = size_t(i / n), col = size_t(i % n);
  x[row * ld + col] += bias[col];
}

}  // namespace

cudaError_t add_bias(float* x, size_t ld, int m, int n, const float* bias, cudaStream_t stream) {
  const int64_t items = int64_t(m) * n;
  return launch(add_bias_kernel, dim3(unsigned((items + threads - 1) / threads)), dim3(threads), 0, stream, x, ld, m,
                n, bias);
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
