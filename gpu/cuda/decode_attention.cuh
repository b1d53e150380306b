#pragma once
// Decode MicroAttention over paged KV blocks (FlashDecoding's split-KV): for each job, kv head and
// block range, the partial attention (m, e, MA) of the few query rows that read that kv head.

#include <cuda_runtime.h>

#include "gpu/backend.hpp"
#include "gpu/cuda/attention_jobs.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// Dynamic shared memory of one decode block for element type `type`, head_dim and rows.
size_t decode_attention_shared_bytes(dtype type, int head_dim, int rows);

/// Thread blocks of the decode kernel for (type, head_dim, rows) that fit on one SM at once.
cudaError_t decode_attention_occupancy(dtype type, int head_dim, int max_rows, int* blocks_per_sm);

/// Runs every job of `launch`; each must have n_q * (n_heads / n_kv_heads) <= max_rows <= 16 rows and
/// n_tiles == 1. Grid: x = launch.n_items (job, split), y = n_kv_heads; 128 threads.
///   q     [n_q][n_heads][head_dim] fp32, token rows q_ld apart (device)
///   KV    the pool layer, element type `type`, layout of attention_launch (device)
///   out   per job: m, e [n_q][n_heads], ma [n_q][n_heads][head_dim] when n_splits == 1; otherwise each
///         split's partial in split_ws (see attention_job_desc), to be folded by combine_splits.
/// m is the largest score q.k / sqrt(head_dim) (natural units), e the sum of exp(score - m), ma the
/// exp-weighted sum of V rows; a row that sees no key gets -inf, 0 and zeros.
cudaError_t decode_attention(const attention_launch& launch, dtype type, int max_rows, cudaStream_t stream);

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
