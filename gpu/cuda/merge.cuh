#pragma once
// The DistAttention merge: partials (m, e, MA) of the same query rows over disjoint key sets folded
// into one, either normalised (the attention output) or kept as a partial (split-KV's combine step).

#include <cuda_runtime.h>

#include "gpu/cuda/attention_jobs.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// The attention output of n_parts partials; parts with e == 0 saw no key and weigh nothing, and a row
/// that no part saw comes out zero. sinks [n_heads] fp32 (device) or null: each head's logit in the denominator.
///   m, e  [n_parts][n_q * n_heads] fp32 (device)
///   ma    [n_parts][n_q * n_heads][head_dim] fp32 (device)
///   out   [n_q][n_heads][head_dim] fp32, token rows out_ld apart (device)
cudaError_t merge_partials(const float* m, const float* e, const float* ma, int n_parts, int n_q, int n_heads,
                           int head_dim, float* out, size_t out_ld, const float* sinks, cudaStream_t stream);

/// For every job of `launch` with n_splits > 1: its split partials (split_ws) folded into its outputs
/// m, e [n_q][n_heads] and ma [n_q][n_heads][head_dim] (device), not normalised. max_rows: the most
/// rows (n_q * n_heads) of any such job.
cudaError_t combine_splits(const attention_launch& launch, int max_rows, cudaStream_t stream);

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
