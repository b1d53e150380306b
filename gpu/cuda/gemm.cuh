#pragma once
// The model's products on cuBLAS: y = x * w^T with fp32 accumulation, for fp32 weights and for fp16 or
// bf16 weights (then the activations are rounded to the weights' type first: cuBLAS takes both inputs
// of one type).

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "gpu/backend.hpp"
#include "gpu/cuda/cublas_api.hpp"
#include "gpu/status.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// y = x * w^T (+ y when accumulate) on `handle`'s stream, through cublasGemmEx (CUBLAS_COMPUTE_32F).
///   x          [m][k] fp32, rows ldx apart (device)
///   w          [n][k] of w_type, rows ldw apart (device)
///   y          [m][n] fp32, rows ldy apart (device)
///   x_scratch  m * k elements of w_type, rows k apart; used when w_type is 16-bit (device)
status gemm(const cublas_api& blas, cublasHandle_t handle, cudaStream_t stream, const float* x, size_t ldx, int m, int k, const void* w,
            dtype w_type, size_t ldw, int n, float* y, size_t ldy, bool accumulate, void* x_scratch);

/// Rounds x [m][k] fp32 (rows ldx apart) to `type` into out [m][k] (rows k apart), nearest even.
cudaError_t convert_rows(const float* x, size_t ldx, int m, int k, dtype type, void* out, cudaStream_t stream);

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
