#pragma once
// Writing the new tokens' K and V into their slots of a KV pool, converted to the pool's element type.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu/backend.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// One thread per (token, kv head, element); f32 is rounded to nearest even for 16-bit pools.
///   k, v   [m][n_kv_heads][head_dim] fp32, token rows ld apart (device)
///   slots  [m]: block * 16 + offset within the block (device)
///   dst    the pool layer: K of (block, head, offset) at base + block * block_stride + k_offset +
///          head * head_stride + offset * head_dim elements of dst.type, V at v_offset (device)
cudaError_t store_kv(const float* k, const float* v, size_t ld, int m, int n_kv_heads, int head_dim,
                     const kv_layer_view& dst, const uint32_t* slots, cudaStream_t stream);

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
