#pragma once
// Rotary position embedding: the table of angles per position (computed in fp64, so that every
// position, far beyond the training context, is exact) and the rotation of query and key heads.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu/cuda/abi.hpp"
#include "gpu/rope_frequencies.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// cos and sin of pos * freq.inverse(i, head_dim) for every token and pair i.
///   pos    [m] (device)
///   table  [m][head_dim / 2][2: cos, sin] fp32 (device)
cudaError_t rope_table(const int32_t* pos, int m, int head_dim, const rope_frequencies& freq, float* table,
                       cudaStream_t stream);

/// Rotates the adjacent pairs (2i, 2i + 1) of every head in place by the table's angles.
///   x      [m][n_heads][head_dim] fp32, token rows ld apart (device)
///   table  [m][head_dim / 2][2] from rope_table (device)
cudaError_t rope(float* x, size_t ld, int m, int n_heads, int head_dim, const float* table, cudaStream_t stream);

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
