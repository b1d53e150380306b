// Merge and combine: one warp per query row. The lanes share the parts: each finds the largest m and the
// total weight over its parts (those that saw a key, e != 0), which the warp then reduces; for the output,
// each lane owns columns lane, lane + 32, ... and adds the parts' MA rows in order, 32 parts' weights at a
// time computed by the lanes and handed round by shuffles, so that the loads of several parts are in flight.
#include "gpu/cuda/merge.cuh"

#include "gpu/cuda/attention_jobs.hpp"
#include "gpu/cuda/device.cuh"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

constexpr int threads = 128;
constexpr int rows_per_block = threads / 32;
constexpr int columns_per_lane = 8;
static_assert(32 * columns_per_lane >= head_dim_max, "a warp covers every column of a row");

/// Folds row `row` of n_parts partials (row r of part p at p * n_rows + r): out_row gets the sum of each
/// part's ma weighted by exp(m - top), divided by the total weight when normalising; top and total
/// (the largest m and the sum of e * exp(m - top)) come back through the references. A finite `sink` is one
/// more logit with no value: it joins top and adds exp(sink - top) to the total.
__device__ __forceinline__ void fold_row(const float* m, const float* e, const float* ma, int n_parts, int n_rows,
                                         int row, int head_dim, bool normalise, float* out_row, float& top,
                                         float& total, float sink = -INFINITY) {
  const int lane = int(threadIdx.x) & 31;
  float my_top = sink;
  for (int p = lane; p < n_parts; p += 32)
    if (e[size_t(p) * n_rows + row] != 0.0f) my_top = fmaxf(my_top, m[size_t(p) * n_rows + row]);
  top = group_max(my_top);
  float my_total = lane == 0 && sink != -INFINITY ? expf(sink - top) : 0.0f;
  for (int p = lane; p < n_parts; p += 32) {
    const size_t i = size_t(p) * n_rows + row;
    if (e[i] != 0.0f) my_total += e[i] * expf(m[i] - top);
  }
  total = group_sum(my_total);
  const float scale = normalise ? (total == 0.0f ? 0.0f : 1.0f / total) : 1.0f;
  float sum[columns_per_lane];
#pragma unroll
  for (int k = 0; k < columns_per_lane; ++k) sum[k] = 0.0f;
  for (int c = 0; c < n_parts; c += 32) {
    const size_t mine = size_t(c + lane) * n_rows + row;
    const float weight = c + lane < n_parts && e[mine] != 0.0f ? expf(m[mine] - top) : 0.0f;
    const int n = imin(32, n_parts - c);
#pragma unroll 4
    for (int j = 0; j < n; ++j) {
      const float w = __shfl_sync(full_mask, weight, j);
      if (w == 0.0f) continue;  // the same for the whole warp
      const float* src = ma + (size_t(c + j) * n_rows + row) * head_dim;
#pragma unroll
      for (int k = 0; k < columns_per_lane; ++k) {
        const int d = lane + 32 * k;
        if (d < head_dim) sum[k] += w * src[d];
      }
    }
  }
#pragma unroll
  for (int k = 0; k < columns_per_lane; ++k) {
    const int d = lane + 32 * k;
    if (d < head_dim) out_row[d] = sum[k] * scale;
  }
}

__global__ void __launch_bounds__(threads) merge_kernel(const float* m, const float* e, const float* ma, int n_parts,
                                                        int n_rows, int n_heads, int head_dim, float* out,
                                                        size_t out_ld, const float* sinks) {
  const int row = int(blockIdx.x) * rows_per_block + int(threadIdx.x >> 5);
  if (row >= n_rows) return;
  float top, total;
  float* out_row = out + size_t(row / n_heads) * out_ld + size_t(row % n_heads) * head_dim;
  fold_row(m, e, ma, n_parts, n_rows, row, head_dim, true, out_row, top, total,
           sinks ? sinks[row % n_heads] : -INFINITY);
}

__global__ void __launch_bounds__(threads) combine_kernel(const __grid_constant__ attention_launch a) {
  const attention_job_desc& job = a.jobs[blockIdx.y];
  const int n_rows = job.n_q * a.n_heads;
  const int row = int(blockIdx.x) * rows_per_block + int(threadIdx.x >> 5);
  if (job.n_splits <= 1 || row >= n_rows) return;
  const size_t splits = size_t(job.n_splits);
  const float* m = job.split_ws;
  const float* e = m + splits * n_rows;
  const float* ma = e + splits * n_rows;
  float top, total;
  fold_row(m, e, ma, job.n_splits, n_rows, row, a.head_dim, false, job.ma + size_t(row) * a.head_dim, top, total);
  if ((threadIdx.x & 31) == 0) {
    job.m[row] = top;
    job.e[row] = total;
  }
}

}  // namespace

cudaError_t merge_partials(const float* m, const float* e, const float* ma, int n_parts, int n_q, int n_heads,
                           int head_dim, float* out, size_t out_ld, const float* sinks, cudaStream_t stream) {
  if (head_dim > 32 * columns_per_lane) return cudaErrorInvalidValue;
  const int n_rows = n_q * n_heads;
  return launch(merge_kernel, dim3(unsigned((n_rows + rows_per_block - 1) / rows_per_block)), dim3(threads), 0,
                stream, m, e, ma, n_parts, n_rows, n_heads, head_dim, out, out_ld, sinks);
}

cudaError_t combine_splits(const attention_launch& launch_table, int max_rows, cudaStream_t stream) {
  return launch(combine_kernel, dim3(unsigned((max_rows + rows_per_block - 1) / rows_per_block),
                                     unsigned(launch_table.n_jobs)),
                dim3(threads), 0, stream, launch_table);
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
