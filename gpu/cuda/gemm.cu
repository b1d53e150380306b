// Products on cuBLAS. Row-major y[m][n] = x[m][k] w[n][k]^T is column-major y^T = w^T x^T with
// w read as a k x n column-major matrix (transposed, lda = ldw) and x as a k x m one (lda = ldx).
#include "gpu/cuda/gemm.cuh"

#include "gpu/cuda/cuda_check.hpp"
#include "gpu/cuda/device.cuh"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

constexpr int threads = 256;

template <class T>
__global__ void __launch_bounds__(threads) convert_kernel(const float* x, size_t ldx, int m, int k, T* out) {
  const int64_t i = int64_t(blockIdx.x) * threads + threadIdx.x;
  if (i >= int64_t(m) * k) return;
  out[i] = from_float<T>(x[size_t(i / k) * ldx + size_t(i % k)]);
}

cudaDataType_t cuda_type(dtype t) {
  switch (t) {
    case dtype::f32: return CUDA_R_32F;
    case dtype::f16: return CUDA_R_16F;
    case dtype::bf16: return CUDA_R_16BF;
    default: break;
  }
  return CUDA_R_32F;
}

}  // namespace

cudaError_t convert_rows(const float* x, size_t ldx, int m, int k, dtype type, void* out, cudaStream_t stream) {
  const dim3 grid(unsigned((int64_t(m) * k + threads - 1) / threads));
  switch (type) {
    case dtype::f16: return launch(convert_kernel<__half>, grid, dim3(threads), 0, stream, x, ldx, m, k, out);
    case dtype::bf16:
      return launch(convert_kernel<__nv_bfloat16>, grid, dim3(threads), 0, stream, x, ldx, m, k, out);
    default: break;
  }
  return cudaErrorInvalidValue;
}

status gemm(const cublas_api& blas, cublasHandle_t handle, cudaStream_t stream, const float* x, size_t ldx, int m, int k, const void* w,
            dtype w_type, size_t ldw, int n, float* y, size_t ldy, bool accumulate, void* x_scratch) {
  if (m == 0 || n == 0) return status::ok();
  const void* b = x;
  size_t ldb = ldx;
  if (w_type != dtype::f32) {
    ILLM_RETURN_IF_ERROR(check(convert_rows(x, ldx, m, k, w_type, x_scratch, stream), "gemm: converting x"));
    b = x_scratch;
    ldb = size_t(k);
  }
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  return check(blas.gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, w, cuda_type(w_type), int(ldw), b,
                            cuda_type(w_type), int(ldb), &beta, y, CUDA_R_32F, int(ldy), CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
