#pragma once
// Whole KV blocks copied between pools on the device (migration of blocks, the KV-moving baseline).

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu/cuda/abi.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// Block dst_ids[i] of the destination arena gets block src_ids[i] of the source arena, i < n, in one
/// launch (16-byte copies; block_bytes a multiple of 16, arenas 16-byte aligned).
///   dst_base, src_base  arenas of block_bytes-sized blocks (device)
///   dst_ids, src_ids    [n] block ids (device)
cudaError_t copy_blocks(void* dst_base, const uint32_t* dst_ids, const void* src_base, const uint32_t* src_ids, int n,
                        size_t block_bytes, cudaStream_t stream);

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
