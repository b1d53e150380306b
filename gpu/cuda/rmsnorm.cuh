#pragma once
// RMSNorm of rows (or of each head of a row): y = x / sqrt(mean(x^2) + eps) * weight.

#include <cuda_runtime.h>

#include <cstddef>

#include "gpu/cuda/abi.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// One thread block per row; y may be x.
///   x       [m][n] fp32, rows ldx apart (device)
///   weight  [n] fp32 (device)
///   y       [m][n] fp32, rows ldy apart (device)
cudaError_t rmsnorm(const float* x, size_t ldx, const float* weight, int m, int n, float eps, float* y, size_t ldy,
                    cudaStream_t stream);

/// RMSNorm of every head of every row, in place; one thread block per head.
///   x       [m][n_heads][head_dim] fp32, rows ld apart (device)
///   weight  [head_dim] fp32 (device)
cudaError_t head_rmsnorm(float* x, size_t ld, int m, int n_heads, int head_dim, const float* weight, float eps,
                         cudaStream_t stream);

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
