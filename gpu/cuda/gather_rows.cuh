#pragma once
// Row gathers: the embedding lookup (rows of the token table), the rows of the tokens that sample, and the
// experts' outputs of each token weighed and added into it.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu/cuda/abi.hpp"
#include "gpu/dtype.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// dst[i] = src[rows[i]], one thread block per row.
///   src   rows ld_src floats apart (device)
///   rows  [n] int32 (device)
///   dst   [n][width] fp32, rows ld_dst apart (device)
cudaError_t gather_rows(const float* src, size_t ld_src, const int32_t* rows, int n, int width, float* dst,
                        size_t ld_dst, cudaStream_t stream);

/// The same from rows of f32, f16 or bf16 elements (ld_src elements apart), widened to fp32.
cudaError_t gather_rows(const void* src, dtype type, size_t ld_src, const int32_t* rows, int n, int width, float* dst,
                        size_t ld_dst, cudaStream_t stream);

/// dst[i] += sum over j < k of weights[i * k + j] * src[slots[i * k + j]], one thread block per row of dst.
///   src      rows ld_src floats apart (device)
///   slots    [m][k] int32, weights [m][k] fp32 (device)
///   dst      [m][width] fp32, rows ld_dst apart (device)
cudaError_t add_weighted_rows(const float* src, size_t ld_src, const int32_t* slots, const float* weights, int m, int k,
                         int width, float* dst, size_t ld_dst, cudaStream_t stream);

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
