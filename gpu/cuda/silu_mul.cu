// SwiGLU's gate, one thread per element.
#include "gpu/cuda/silu_mul.cuh"

#include "gpu/cuda/device.cuh"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

constexpr int threads = 256;

__global__ void __launch_bounds__(threads) silu_mul_kernel(const float* gate, const float* up, size_t ld_in, int m,
                                                           int n, float* out, size_t ld_out,
                                                           gated_activation act) {
  const int64_t i = int64_t(blockIdx.x) * threads + threadIdx.x;
  if (i >= int64_t(m) * n) return;
  const size_t row = size_t(i / n), col = size_t(i % n);
  out[row * ld_out + col] = act(gate[row * ld_in + col], up[row * ld_in + col]);
}

}  // namespace

cudaError_t silu_mul(const float* gate, const float* up, size_t ld_in, int m, int n, float* out, size_t ld_out,
                     const gated_activation& act, cudaStream_t stream) {
  const int64_t items = int64_t(m) * n;
  return launch(silu_mul_kernel, dim3(unsigned((items + threads - 1) / threads)), dim3(threads), 0, stream, gate, up,
                ld_in, m, n, out, ld_out, act);
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
