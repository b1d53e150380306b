// Prefill MicroAttention. One thread block per (job, row tile, block range, kv head), 128 threads:
// Tpr threads per query row, each holding head_dim / Tpr of the row's query and output columns
// (columns j, j + Tpr, ...) in registers. K and V runs stream into shared memory through cp.async as
// in the decode kernel; per block each row computes its 16 scores (a sum over its Tpr threads), folds
// them into its running max and exp-sum (base 2) and accumulates the weighted V rows. The causal mask
// compares each key's position with the row's query position.
#include "gpu/cuda/prefill_attention.cuh"

#include "gpu/cuda/attention_common.cuh"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

constexpr int threads = 128;
constexpr int columns_max = 32;  // per thread

/// Threads per row for head_dim: the fewest (a power of two) that leave at most 32 columns each.
int threads_per_row(int head_dim) {
  int tpr = 1;
  while (tpr * columns_max < head_dim) tpr *= 2;
  return tpr;
}

template <class T, int Tpr>
__global__ void __launch_bounds__(threads) prefill_kernel(const __grid_constant__ attention_launch a) {
  ILLM_DYNAMIC_SHARED(smem);
  constexpr int rows_per_tile = threads / Tpr;
  const int hd = a.head_dim, group = a.n_heads / a.n_kv_heads, kv_head = int(blockIdx.y);
  const attention_job_desc& job = a.jobs[find_job(a, int(blockIdx.x))];
  const int local = int(blockIdx.x) - job.item_begin;
  const int tile = local / job.n_splits, split = local % job.n_splits;
  const int b0 = split * job.blocks_per_split, b1 = imin(job.n_blocks, b0 + job.blocks_per_split);
  const int rows = job.n_q * group, tid = int(threadIdx.x), j = tid % Tpr;
  const int r = tile * rows_per_tile + tid / Tpr;
  const bool valid = r < rows;
  const int my_pos = valid ? job.q_pos[r / group] : -1;
  int max_pos = -1;  // the tile's latest query
  const int last_row = imin(rows, (tile + 1) * rows_per_tile) - 1;
  for (int t = tile * rows_per_tile / group; t <= last_row / group; ++t) max_pos = imax(max_pos, job.q_pos[t]);

  float q[columns_max], acc[columns_max];
  const float* q_row = job.q + size_t(valid ? r / group : 0) * job.q_ld + size_t(kv_head * group + r % group) * hd;
#pragma unroll
  for (int i = 0; i < columns_max; ++i) {
    const int d = j + Tpr * i;
    q[i] = valid && d < hd ? q_row[d] * a.scale_log2 : 0.0f;
    acc[i] = 0.0f;
  }
  float m_run = -INFINITY, e_run = 0.0f;

  const size_t run = size_t(16) * hd;
  T* stages = reinterpret_cast<T*>(smem);
  const block_pipeline<T> pipeline{a, job, kv_head, b0, b1, max_pos, stages, run};
  pipeline.start();
  for (int b = b0; b < b1; ++b) {
    const T* ks = pipeline.wait(b);
    if (!ks) continue;  // no query of this tile sees the block
    const T* vs = ks + run;
    const int pos0 = job.block_pos[b];

    float s[16];
    float block_max = -INFINITY;
#pragma unroll
    for (int t = 0; t < 16; ++t) {
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < columns_max; ++c) {
        const int d = j + Tpr * c;
        if (d < hd) dot += q[c] * to_float(ks[size_t(t) * hd + d]);
      }
      dot = group_sum<Tpr>(dot);
      s[t] = sees(a, pos0 + t, my_pos) ? dot : -INFINITY;
      block_max = fmaxf(block_max, s[t]);
    }
    const float m_new = fmaxf(m_run, block_max);
    const float corr = m_run == -INFINITY ? 0.0f : exp2f(m_run - m_new);
    float sum = 0.0f;
#pragma unroll
    for (int t = 0; t < 16; ++t) {
      s[t] = s[t] == -INFINITY ? 0.0f : exp2f(s[t] - m_new);  // now the weight
      sum += s[t];
    }
    e_run = e_run * corr + sum;
    m_run = m_new;
#pragma unroll
    for (int c = 0; c < columns_max; ++c) acc[c] *= corr;
    const int n_keys = imin(16, max_pos - pos0 + 1);  // keys some row of the tile sees
#pragma unroll
    for (int t = 0; t < 16; ++t) {
      if (t >= n_keys) break;
#pragma unroll
      for (int c = 0; c < columns_max; ++c) {
        const int d = j + Tpr * c;
        if (d < hd) acc[c] += s[t] * to_float(vs[size_t(t) * hd + d]);
      }
    }
  }

  if (!valid) return;
  const int row = (r / group) * a.n_heads + kv_head * group + r % group;
  const partial_target out = partial_for(a, job, split, row);
  if (j == 0) {
    out.m[out.index] = m_run == -INFINITY ? -INFINITY : m_run * ln2;
    out.e[out.index] = e_run;
  }
#pragma unroll
  for (int c = 0; c < columns_max; ++c) {
    const int d = j + Tpr * c;
    if (d < hd) out.ma[out.index * hd + d] = acc[c];
  }
}

/// Launches the kernel for T, Tpr on `a`, or, when `occupancy` is set, stores how many of its thread
/// blocks fit on one SM for head_dim.
template <class T, int Tpr>
cudaError_t run(const attention_launch* a, int head_dim, int* occupancy, cudaStream_t stream) {
  const size_t shared = size_t(attention_stages) * 2 * 16 * head_dim * sizeof(T);
  auto* kernel = prefill_kernel<T, Tpr>;
  if (cudaError_t err = allow_shared(kernel, shared); err != cudaSuccess) return err;
  if (occupancy)
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(occupancy, reinterpret_cast<const void*>(kernel), threads,
                                                         shared);
  return launch(kernel, dim3(unsigned(a->n_items), unsigned(a->n_kv_heads)), dim3(threads), shared, stream, *a);
}

template <class T>
cudaError_t run_tpr(const attention_launch* a, int head_dim, int* occupancy, cudaStream_t stream) {
  switch (threads_per_row(head_dim)) {
    case 1: return run<T, 1>(a, head_dim, occupancy, stream);
    case 2: return run<T, 2>(a, head_dim, occupancy, stream);
    case 4: return run<T, 4>(a, head_dim, occupancy, stream);
    default: return run<T, 8>(a, head_dim, occupancy, stream);
  }
}

cudaError_t dispatch(const attention_launch* a, dtype type, int head_dim, int* occupancy, cudaStream_t stream) {
  if (head_dim > head_dim_max || head_dim % 2 != 0) return cudaErrorInvalidValue;
  switch (type) {
    case dtype::f32: return run_tpr<float>(a, head_dim, occupancy, stream);
    case dtype::f16: return run_tpr<__half>(a, head_dim, occupancy, stream);
    case dtype::bf16: return run_tpr<__nv_bfloat16>(a, head_dim, occupancy, stream);
    default: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace

int prefill_rows_per_tile(int head_dim) { return threads / threads_per_row(head_dim); }

cudaError_t prefill_attention(const attention_launch& launch, dtype type, cudaStream_t stream) {
  return dispatch(&launch, type, launch.head_dim, nullptr, stream);
}

cudaError_t prefill_attention_occupancy(dtype type, int head_dim, int* blocks_per_sm) {
  return dispatch(nullptr, type, head_dim, blocks_per_sm, nullptr);
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
