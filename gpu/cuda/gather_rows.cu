// Row gather: one thread block per destination row.
#include "gpu/cuda/gather_rows.cuh"

#include "gpu/cuda/device.cuh"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

constexpr int threads = 256;

__global__ void __launch_bounds__(threads) gather_rows_kernel(const float* src, size_t ld_src, const int32_t* rows,
                                                              int width, float* dst, size_t ld_dst) {
  const float* from = src + size_t(rows[blockIdx.x]) * ld_src;
  float* to = dst + size_t(blockIdx.x) * ld_dst;
  for (int i = int(threadIdx.x); i < width; i += threads) to[i] = from[i];
}

}  // namespace

cudaError_t gather_rows(const float* src, size_t ld_src, const int32_t* rows, int n, int width, float* dst,
                        size_t ld_dst, cudaStream_t stream) {
  return launch(gather_rows_kernel, dim3(unsigned(n)), dim3(threads), 0, stream, src, ld_src, rows, width, dst,
                ld_dst);
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
