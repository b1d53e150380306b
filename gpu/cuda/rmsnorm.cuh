#pragma once
// RMSNorm of rows: y = x / sqrt(mean(x^2) + eps) * weight.

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

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
