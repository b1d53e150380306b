#pragma once
// A projection's bias added to its output rows.

#include <cuda_runtime.h>

#include <cstddef>

#include "gpu/cuda/abi.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// x[i][j] += bias[j]; one thread per element.
///   x     [m][n] fp32, rows ld apart (device)
///   bias  [n] fp32 (device)
cudaError_t add_bias(float* x, size_t ld, int m, int n, const float* bias, cudaStream_t stream);

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
