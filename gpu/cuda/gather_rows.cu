// Row gather: one thread block per destination row.
#include "gpu/cuda/gather_rows.cuh"

#include "gpu/cuda/device.cuh"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

constexpr int threads = 256;

template <class T>
__global__ void __launch_bounds__(threads) gather_rows_kernel(const T* src, size_t ld_src, const int32_t* rows,
                                                              int width, float* dst, size_t ld_dst) {
  const T* from = src + size_t(rows[blockIdx.x]) * ld_src;
  float* to = dst + size_t(blockIdx.x) * ld_dst;
  for (int i = int(threadIdx.x); i < width; i += threads) to[i] = to_float(from[i]);
}

__global__ void __launch_bounds__(threads) add_weighted_rows_kernel(const float* src, size_t ld_src, const int32_t* slots,
                                                               const float* weights, int k, int width, float* dst,
                                                               size_t ld_dst) {
  const size_t row = blockIdx.x;
  float* to = dst + row * ld_dst;
  for (int i = int(threadIdx.x); i < width; i += threads) {
    float sum = to[i];
    for (int j = 0; j < k; ++j) sum += weights[row * k + j] * src[size_t(slots[row * k + j]) * ld_src + i];
    to[i] = sum;
  }
}

}  // namespace

cudaError_t add_weighted_rows(const float* src, size_t ld_src, const int32_t* slots, const float* weights, int m, int k,
                         int width, float* dst, size_t ld_dst, cudaStream_t stream) {
  return launch(add_weighted_rows_kernel, dim3(unsigned(m)), dim3(threads), 0, stream, src, ld_src, slots, weights, k, width,
                dst, ld_dst);
}

cudaError_t gather_rows(const float* src, size_t ld_src, const int32_t* rows, int n, int width, float* dst,
                        size_t ld_dst, cudaStream_t stream) {
  return launch(gather_rows_kernel<float>, dim3(unsigned(n)), dim3(threads), 0, stream, src, ld_src, rows, width, dst,
                ld_dst);
}

cudaError_t gather_rows(const void* src, dtype type, size_t ld_src, const int32_t* rows, int n, int width, float* dst,
                        size_t ld_dst, cudaStream_t stream) {
  switch (type) {
    case dtype::f32:
      return launch(gather_rows_kernel<float>, dim3(unsigned(n)), dim3(threads), 0, stream, static_cast<const float*>(src), ld_src, rows,
                    width, dst, ld_dst);
    case dtype::f16:
      return launch(gather_rows_kernel<__half>, dim3(unsigned(n)), dim3(threads), 0, stream, static_cast<const __half*>(src), ld_src, rows,
                    width, dst, ld_dst);
    case dtype::bf16:
      return launch(gather_rows_kernel<__nv_bfloat16>, dim3(unsigned(n)), dim3(threads), 0, stream,
                    static_cast<const __nv_bfloat16*>(src), ld_src, rows, width, dst, ld_dst);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
