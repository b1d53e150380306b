#pragma once
// Device pieces shared by the decode and prefill attention kernels: finding a grid item's job and
// split, streaming K and V runs of blocks into shared memory with cp.async (several blocks in flight),
// vector loads, and writing a partial.

#include <cuda_pipeline.h>

#include <cstring>
#include <type_traits>

#include "gpu/cuda/attention_jobs.hpp"
#include "gpu/cuda/device.cuh"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// Index of the job that owns grid item `item` (jobs are sorted by item_begin).
__device__ __forceinline__ int find_job(const attention_launch& a, int item) {
  int lo = 0, hi = a.n_jobs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (a.jobs[mid].item_begin <= item)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/// Whether a query at position `query` sees the key at `key`: not after it, and within the window if any.
__device__ __forceinline__ bool sees(const attention_launch& a, int key, int query) {
  return key <= query && (a.window == 0 || key > query - a.window);
}

/// Starts copying block `block`'s K then V run of `kv_head` (16 x head_dim elements each) into
/// `stage` [2][16][head_dim], 16 bytes per copy, spread over the block's threads.
template <class T>
__device__ __forceinline__ void load_block_async(const attention_launch& a, uint32_t block, int kv_head,
                                                 T* stage) {
  const T* head = static_cast<const T*>(a.kv_base) + size_t(block) * a.block_stride + size_t(kv_head) * a.head_stride;
  const char* k = reinterpret_cast<const char*>(head + a.k_offset);
  const char* v = reinterpret_cast<const char*>(head + a.v_offset);
  const int pieces = 16 * a.head_dim * int(sizeof(T)) / 16;  // per run
  char* dst = reinterpret_cast<char*>(stage);
  for (int c = int(threadIdx.x); c < 2 * pieces; c += int(blockDim.x)) {
    const char* src = c < pieces ? k + size_t(c) * 16 : v + size_t(c - pieces) * 16;
    __pipeline_memcpy_async(dst + size_t(c) * 16, src, 16);
  }
}

/// Reads a V-sized value from p (aligned to sizeof(V)).
/// A job's blocks [b0, b1) streamed through `attention_stages` shared-memory stages of K then V (2 * run
/// elements each): the loads of the first ones are issued ahead, and each block's wait issues the load of
/// the block `attention_stages - 1` after it. Blocks past max_pos (no query sees them) are never loaded.
template <class T>
struct block_pipeline {
  const attention_launch& a;
  const attention_job_desc& job;
  int kv_head, b0, b1, max_pos;
  T* stages;
  size_t run;

  __device__ __forceinline__ T* stage(int i) const { return stages + size_t(i % attention_stages) * 2 * run; }

  /// Issues the loads of the first attention_stages - 1 blocks.
  __device__ __forceinline__ void start() const {
    for (int i = 0; i < attention_stages - 1; ++i) {
      const int b = b0 + i;
      if (b < b1 && job.block_pos[b] <= max_pos) load_block_async(a, job.blocks[b], kv_head, stage(i));
      __pipeline_commit();
    }
  }

  /// Waits (every thread of the block) until block b has landed, issues the load of a later one into the
  /// stage block b - 1 freed, and returns b's K (its V follows at + run); null when no query sees block b.
  __device__ __forceinline__ const T* wait(int b) const {
    const int i = b - b0;
    __pipeline_wait_prior(attention_stages - 2);
    __syncthreads();  // block b has landed for every thread, and block b - 1's stage is free again
    const int next = b + attention_stages - 1;
    if (next < b1 && job.block_pos[next] <= max_pos)
      load_block_async(a, job.blocks[next], kv_head, stage(i + attention_stages - 1));
    __pipeline_commit();
    return job.block_pos[b] > max_pos ? nullptr : stage(i);
  }
};

template <class V, class S>
__device__ __forceinline__ V load_raw(const S* p) {
#if ILLM_CUDA_EMULATION
  return emu_load<V>(p);
#else
  return *reinterpret_cast<const V*>(p);
#endif
}

/// N consecutive elements of T at p (aligned to N * sizeof(T) when that is 4, 8 or 16 bytes) as floats.
template <int N, class T>
__device__ __forceinline__ void load_floats(const T* p, float (&out)[N]) {
  constexpr int bytes = N * int(sizeof(T));
  if constexpr (bytes == 16 || bytes == 8 || bytes == 4 || bytes == 32) {
    using raw_t = std::conditional_t<bytes == 8, uint2, std::conditional_t<bytes == 4, uint32_t, uint4>>;
    constexpr int per_raw = int(sizeof(raw_t) / sizeof(T));
#pragma unroll
    for (int part = 0; part < N / per_raw; ++part) {
      const raw_t raw = load_raw<raw_t>(p + part * per_raw);
      alignas(16) T elements[per_raw];
      memcpy(elements, &raw, sizeof raw);  // registers to registers: no copy survives compilation
#pragma unroll
      for (int i = 0; i < per_raw; ++i) out[part * per_raw + i] = to_float(elements[i]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = to_float(p[i]);
  }
}

/// Where a partial goes: the job's outputs when it has one split, its split's slot in split_ws otherwise.
struct partial_target {
  float* m;
  float* e;
  float* ma;
  size_t index;  ///< row index into m and e; ma row index * head_dim
};

__device__ __forceinline__ partial_target partial_for(const attention_launch& a, const attention_job_desc& job,
                                                      int split, int row) {
  if (job.n_splits == 1) return {job.m, job.e, job.ma, size_t(row)};
  const size_t rows = size_t(job.n_q) * a.n_heads, splits = size_t(job.n_splits);
  float* m = job.split_ws;
  return {m, m + splits * rows, m + 2 * splits * rows, size_t(split) * rows + size_t(row)};
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
