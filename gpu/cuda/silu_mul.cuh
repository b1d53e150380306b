#pragma once
// SwiGLU's gate: out = act(gate, up) elementwise (gpu/gated_activation.hpp).

#include <cuda_runtime.h>

#include <cstddef>

#include "gpu/cuda/abi.hpp"
#include "gpu/gated_activation.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// One thread per element.
///   gate, up  [m][n] fp32, rows ld_in apart (device)
///   out       [m][n] fp32, rows ld_out apart (device)
cudaError_t silu_mul(const float* gate, const float* up, size_t ld_in, int m, int n, float* out, size_t ld_out,
                     const gated_activation& act, cudaStream_t stream);

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
