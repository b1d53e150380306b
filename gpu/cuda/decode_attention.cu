// Decode MicroAttention. One thread block per (job, block range, kv head), 128 threads. The K and V
// runs of each KV block (16 tokens) stream into shared memory through cp.async, attention_stages
// blocks in flight, so the loads of the next blocks overlap the arithmetic on this one. Per block:
//   A. scores: 8 threads per token, each a slice of head_dim, for every query row of this kv head
//      (GQA: the rows share the K and V the block loaded once);
//   B. online softmax: 16 threads per row keep its running max and exp-sum in registers (base 2);
//   C. values: each thread owns head_dim / 128 output columns of every row.
// The partial of the range goes to the job's outputs, or to the split workspace (combine_splits).
#include "gpu/cuda/decode_attention.cuh"

#include "gpu/cuda/attention_common.cuh"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

constexpr int threads = 128;

/// Shared memory of one block: the stages, then the queries and the per-row scratch.
struct decode_layout {
  size_t run;  // elements of one K (or V) run: 16 x head_dim
  size_t stage_bytes, q_offset, s_offset, corr_offset, m_offset, e_offset, pos_offset, total;
  __host__ __device__ decode_layout(int head_dim, size_t element_bytes, int rows) {
    run = size_t(16) * head_dim;
    stage_bytes = 2 * run * element_bytes;
    q_offset = attention_stages * stage_bytes;
    s_offset = q_offset + sizeof(float) * size_t(rows) * head_dim;
    corr_offset = s_offset + sizeof(float) * size_t(rows) * 16;
    m_offset = corr_offset + sizeof(float) * size_t(rows);
    e_offset = m_offset + sizeof(float) * size_t(rows);
    pos_offset = e_offset + sizeof(float) * size_t(rows);
    total = pos_offset + sizeof(int) * size_t(rows);
  }
};

/// T: KV element type; Rows: most query rows per kv head; Vec: elements per load in the score phase.
template <class T, int Rows, int Vec>
__global__ void __launch_bounds__(threads) decode_kernel(const __grid_constant__ attention_launch a) {
  ILLM_DYNAMIC_SHARED(smem);
  const int hd = a.head_dim, group = a.n_heads / a.n_kv_heads, kv_head = int(blockIdx.y);
  const attention_job_desc& job = a.jobs[find_job(a, int(blockIdx.x))];
  const int split = int(blockIdx.x) - job.item_begin;
  const int b0 = split * job.blocks_per_split, b1 = imin(job.n_blocks, b0 + job.blocks_per_split);
  const int rows = job.n_q * group, tid = int(threadIdx.x);
  const decode_layout lay(hd, sizeof(T), Rows);
  T* stages = reinterpret_cast<T*>(smem);
  float* q_s = reinterpret_cast<float*>(smem + lay.q_offset);    // [Rows][hd], scaled to base 2
  float* s_s = reinterpret_cast<float*>(smem + lay.s_offset);    // [Rows][16]: scores, then weights
  float* corr_s = reinterpret_cast<float*>(smem + lay.corr_offset);  // [Rows] rescale of this block
  float* m_s = reinterpret_cast<float*>(smem + lay.m_offset);    // [Rows] final max (base 2)
  float* e_s = reinterpret_cast<float*>(smem + lay.e_offset);    // [Rows] final exp-sum
  int* pos_s = reinterpret_cast<int*>(smem + lay.pos_offset);    // [Rows] position of the row's query

  // Row r is query token r / group, head kv_head * group + r % group.
  for (int i = tid; i < Rows * hd; i += threads) {
    const int r = i / hd, d = i % hd;
    float x = 0.0f;
    if (r < rows)
      x = job.q[size_t(r / group) * job.q_ld + size_t(kv_head * group + r % group) * hd + d] * a.scale_log2;
    q_s[i] = x;
  }
  if (tid < Rows) pos_s[tid] = tid < rows ? job.q_pos[tid / group] : -1;
  int max_pos = -1;
  for (int t = 0; t < job.n_q; ++t) max_pos = imax(max_pos, job.q_pos[t]);

  constexpr int row_groups = (Rows + threads / 16 - 1) / (threads / 16);  // phase B rows per thread
  float m_run[row_groups], e_run[row_groups];
#pragma unroll
  for (int g = 0; g < row_groups; ++g) {
    m_run[g] = -INFINITY;
    e_run[g] = 0.0f;
  }
  float acc[Rows][2];
#pragma unroll
  for (int r = 0; r < Rows; ++r) acc[r][0] = acc[r][1] = 0.0f;

  const block_pipeline<T> pipeline{a, job, kv_head, b0, b1, max_pos, stages, lay.run};
  pipeline.start();
  for (int b = b0; b < b1; ++b) {
    const T* ks = pipeline.wait(b);
    if (!ks) continue;  // no query of this job sees the block
    const T* vs = ks + lay.run;
    const int pos0 = job.block_pos[b];

    {  // A. scores: token t = tid / 8, slice tid % 8 of its head_dim in chunks of Vec elements
      const int t = tid >> 3, slice = tid & 7, chunks = hd / Vec;
      constexpr int chunks_max = (head_dim_max / Vec + 7) / 8;
      float k[chunks_max][Vec];
#pragma unroll
      for (int c = 0; c < chunks_max; ++c) {
        const int chunk = slice + 8 * c;
        if (chunk < chunks)
          load_floats<Vec>(ks + size_t(t) * hd + chunk * Vec, k[c]);
        else
#pragma unroll
          for (int v = 0; v < Vec; ++v) k[c][v] = 0.0f;
      }
#pragma unroll
      for (int r = 0; r < Rows; ++r) {
        if (r >= rows) break;  // the same for the whole block
        float dot = 0.0f;
#pragma unroll
        for (int c = 0; c < chunks_max; ++c) {
          const int chunk = slice + 8 * c;
          if (chunk >= chunks) continue;
          float q[Vec];
          load_floats<Vec>(q_s + size_t(r) * hd + chunk * Vec, q);
#pragma unroll
          for (int v = 0; v < Vec; ++v) dot += q[v] * k[c][v];
        }
        dot = group_sum<8>(dot);
        if (slice == 0) s_s[r * 16 + t] = pos0 + t <= pos_s[r] ? dot : -INFINITY;
      }
    }
    __syncthreads();

#pragma unroll
    for (int g = 0; g < row_groups; ++g) {  // B. softmax: row r0 + tid / 16, token tid % 16
      const int r = g * (threads / 16) + (tid >> 4), t = tid & 15;
      const bool valid = r < rows;
      const float s = valid ? s_s[r * 16 + t] : -INFINITY;
      const float m_new = fmaxf(m_run[g], group_max<16>(s));
      const float p = s == -INFINITY ? 0.0f : exp2f(s - m_new);
      const float sum = group_sum<16>(p);
      const float corr = m_run[g] == -INFINITY ? 0.0f : exp2f(m_run[g] - m_new);
      e_run[g] = e_run[g] * corr + sum;
      m_run[g] = m_new;
      if (valid) {
        s_s[r * 16 + t] = p;
        if (t == 0) corr_s[r] = corr;
      }
    }
    __syncthreads();

    {  // C. values: columns tid and tid + 128 of every row, over the keys some query sees
      const int n_keys = imin(16, max_pos - pos0 + 1);
      const int d0 = tid, d1 = tid + threads;
#pragma unroll
      for (int r = 0; r < Rows; ++r)
        if (r < rows) {
          acc[r][0] *= corr_s[r];
          acc[r][1] *= corr_s[r];
        }
      for (int t = 0; t < n_keys; ++t) {
        const float v0 = d0 < hd ? to_float(vs[size_t(t) * hd + d0]) : 0.0f;
        const float v1 = d1 < hd ? to_float(vs[size_t(t) * hd + d1]) : 0.0f;
#pragma unroll
        for (int r = 0; r < Rows; ++r)
          if (r < rows) {
            const float p = s_s[r * 16 + t];
            acc[r][0] += p * v0;
            acc[r][1] += p * v1;
          }
      }
    }
  }

#pragma unroll
  for (int g = 0; g < row_groups; ++g) {
    const int r = g * (threads / 16) + (tid >> 4);
    if (r < rows && (tid & 15) == 0) {
      m_s[r] = m_run[g];
      e_s[r] = e_run[g];
    }
  }
  __syncthreads();
#pragma unroll
  for (int r = 0; r < Rows; ++r) {
    if (r >= rows) break;
    const int row = (r / group) * a.n_heads + kv_head * group + r % group;
    const partial_target out = partial_for(a, job, split, row);
    if (tid == 0) {
      out.m[out.index] = m_s[r] == -INFINITY ? -INFINITY : m_s[r] * ln2;
      out.e[out.index] = e_s[r];
    }
    if (tid < hd) out.ma[out.index * hd + tid] = acc[r][0];
    if (tid + threads < hd) out.ma[out.index * hd + tid + threads] = acc[r][1];
  }
}

/// Launches the kernel for T, Rows, Vec on `a`, or, when `occupancy` is set, stores how many of its
/// thread blocks fit on one SM for head_dim.
template <class T, int Rows, int Vec>
cudaError_t run(const attention_launch* a, int head_dim, int* occupancy, cudaStream_t stream) {
  const size_t shared = decode_layout(head_dim, sizeof(T), Rows).total;
  auto* kernel = decode_kernel<T, Rows, Vec>;
  if (cudaError_t err = allow_shared(kernel, shared); err != cudaSuccess) return err;
  if (occupancy)
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(occupancy, reinterpret_cast<const void*>(kernel), threads,
                                                         shared);
  return launch(kernel, dim3(unsigned(a->n_items), unsigned(a->n_kv_heads)), dim3(threads), shared, stream, *a);
}

template <class T, int Rows>
cudaError_t run_vec(const attention_launch* a, int head_dim, int* occupancy, cudaStream_t stream) {
  constexpr int wide = sizeof(T) == 4 ? 4 : 8;  // 16 bytes per load
  return head_dim % wide == 0 ? run<T, Rows, wide>(a, head_dim, occupancy, stream)
                              : run<T, Rows, 2>(a, head_dim, occupancy, stream);
}

template <class T>
cudaError_t run_rows(const attention_launch* a, int head_dim, int max_rows, int* occupancy, cudaStream_t stream) {
  if (max_rows <= 1) return run_vec<T, 1>(a, head_dim, occupancy, stream);
  if (max_rows <= 2) return run_vec<T, 2>(a, head_dim, occupancy, stream);
  if (max_rows <= 4) return run_vec<T, 4>(a, head_dim, occupancy, stream);
  if (max_rows <= 8) return run_vec<T, 8>(a, head_dim, occupancy, stream);
  return run_vec<T, 16>(a, head_dim, occupancy, stream);
}

cudaError_t dispatch(const attention_launch* a, dtype type, int head_dim, int max_rows, int* occupancy,
                     cudaStream_t stream) {
  if (max_rows > decode_rows_max || head_dim > head_dim_max || head_dim % 2 != 0) return cudaErrorInvalidValue;
  switch (type) {
    case dtype::f32: return run_rows<float>(a, head_dim, max_rows, occupancy, stream);
    case dtype::f16: return run_rows<__half>(a, head_dim, max_rows, occupancy, stream);
    case dtype::bf16: return run_rows<__nv_bfloat16>(a, head_dim, max_rows, occupancy, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

size_t decode_attention_shared_bytes(dtype type, int head_dim, int rows) {
  int padded = 1;
  while (padded < rows) padded *= 2;
  return decode_layout(head_dim, dtype_bytes(type), padded).total;
}

cudaError_t decode_attention(const attention_launch& launch, dtype type, int max_rows, cudaStream_t stream) {
  return dispatch(&launch, type, launch.head_dim, max_rows, nullptr, stream);
}

cudaError_t decode_attention_occupancy(dtype type, int head_dim, int max_rows, int* blocks_per_sm) {
  return dispatch(nullptr, type, head_dim, max_rows, blocks_per_sm, nullptr);
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
