#pragma once
// Prefill MicroAttention over paged KV blocks: chunks of many query tokens (causal within the chunk
// and against the cached context), tiled by query rows and split by block ranges.

#include <cuda_runtime.h>

#include "gpu/backend.hpp"
#include "gpu/cuda/attention_jobs.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// Query rows (tokens x heads sharing one kv head) one prefill thread block takes, for head_dim.
int prefill_rows_per_tile(int head_dim);

/// Thread blocks of the prefill kernel for (type, head_dim) that fit on one SM at once.
cudaError_t prefill_attention_occupancy(dtype type, int head_dim, int* blocks_per_sm);

/// Runs every job of `launch`, job j's rows cut into n_tiles tiles of prefill_rows_per_tile rows
/// (row r = token r / group, head kv_head * group + r % group). Grid: x = launch.n_items
/// (job, tile, split), y = n_kv_heads; 128 threads. Layouts and outputs as decode_attention's:
///   q   [n_q][n_heads][head_dim] fp32, token rows q_ld apart; q_pos [n_q] (device)
///   KV  the pool layer, element type `type` (device)
///   out m, e [n_q][n_heads] and ma [n_q][n_heads][head_dim], or the split workspace (device)
cudaError_t prefill_attention(const attention_launch& launch, dtype type, cudaStream_t stream);

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
