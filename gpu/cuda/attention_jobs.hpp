#pragma once
// The job table of one attention launch, filled on the host and passed to the kernels by value (a
// kernel parameter, so it needs no device copy and no lifetime management). Each job is one sequence's
// queries against its blocks in one pool (attention_job of gpu/backend.hpp); the grid's x items are the
// jobs' (row tile, block range) pairs, its y the kv heads.

#include <cstddef>
#include <cstdint>

#include "gpu/cuda/abi.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// Jobs per launch: the table stays under the 32 KiB kernel-parameter limit of CUDA 12.1+.
inline constexpr int max_jobs_per_launch = 256;

/// Rows (query tokens x heads sharing one kv head) up to which a job takes the decode kernel.
inline constexpr int decode_rows_max = 16;

/// KV blocks whose K and V are in a thread block's shared memory at once (one computed, the others
/// arriving).
inline constexpr int attention_stages = 3;

/// The largest head_dim the kernels take.
inline constexpr int head_dim_max = 256;

/// One job as the kernels read it: device pointers laid out as attention_job documents, plus its split.
struct attention_job_desc {
  const float* q = nullptr;            ///< [n_q][n_heads][head_dim], token rows q_ld floats apart
  const int32_t* q_pos = nullptr;      ///< [n_q]
  const uint32_t* blocks = nullptr;    ///< [n_blocks] physical block ids
  const int32_t* block_pos = nullptr;  ///< [n_blocks] position of each block's first token
  float* m = nullptr;                  ///< out [n_q][n_heads]
  float* e = nullptr;                  ///< out [n_q][n_heads]
  float* ma = nullptr;                 ///< out [n_q][n_heads][head_dim]
  /// When n_splits > 1, each split's partial: [n_splits][rows] m, then [n_splits][rows] e, then
  /// [n_splits][rows][head_dim] ma, rows = n_q * n_heads; combine_splits folds them into m, e, ma.
  float* split_ws = nullptr;
  uint64_t q_ld = 0;
  int32_t n_q = 0;
  int32_t n_blocks = 0;
  int32_t item_begin = 0;        ///< first grid x item of this job
  int32_t n_tiles = 1;           ///< row tiles (the decode kernel takes all rows in one)
  int32_t n_splits = 1;          ///< block ranges, one partial each
  int32_t blocks_per_split = 0;  ///< blocks per range (the last may have fewer)
};

/// One launch: the pool layer, the shape and the jobs.
struct attention_launch {
  const void* kv_base = nullptr;  ///< the pool; block b's K run for kv head h (16 x head_dim) starts at
                                  ///< b * block_stride + k_offset + h * head_stride elements, V at v_offset
  uint64_t block_stride = 0, k_offset = 0, v_offset = 0, head_stride = 0;
  int32_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int32_t window = 0;  ///< a query sees keys newer than its position - window (0: every earlier key)
  int32_t n_jobs = 0;
  int32_t n_items = 0;     ///< grid x: sum over jobs of n_tiles * n_splits
  float scale_log2 = 0;    ///< log2(e) / sqrt(head_dim): scores come out in base-2 units
  attention_job_desc jobs[max_jobs_per_launch];
};

static_assert(sizeof(attention_launch) < 32000, "the table must fit in a kernel parameter");

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
