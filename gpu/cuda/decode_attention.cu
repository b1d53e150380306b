// Decode MicroAttention. One thread block per (job, block range, kv head), 4 warps. Each warp takes every
// fourth KV block (16 tokens) of the range and keeps its own online softmax, so the loop has no barrier
// across the block: a warp loads K and V straight from device memory into registers (16 bytes per lane
// where head_dim allows), and the other warps' loads are in flight while it computes. Per KV block:
//   scores: lanes 2t and 2t + 1 take token t, each every other chunk of its head_dim, for every query row
//           of this kv head (GQA: the rows share the K the warp loaded once); a shuffle adds the pair;
//   softmax: each row's max and exp-sum over the 16 tokens by shuffles, folded into the warp's running
//            ones; the weights go to the warp's slice of shared memory;
//   values: each lane owns VecV consecutive columns of every 32 * VecV and adds the 16 tokens' V rows
//           (loaded at the block's start, with K) weighted by each row's weights.
// At the end the warps' partials are merged in shared memory into the range's partial (m, e, MA), which
// goes to the job's outputs or to the split workspace (combine_splits).
#include "gpu/cuda/decode_attention.cuh"

#include "gpu/cuda/attention_common.cuh"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

constexpr int threads = 128;
constexpr int warps = threads / 32;
constexpr int k_batch = 8;  // K loads of a lane in flight at once

/// Shared memory of one block: the queries, the merged MA, the warps' weights, maxima and exp-sums.
struct decode_layout {
  size_t q_offset, acc_offset, w_offset, m_offset, e_offset, pos_offset, total;
  __host__ __device__ decode_layout(int head_dim, int rows) {
    q_offset = 0;
    acc_offset = q_offset + sizeof(float) * size_t(rows) * head_dim;
    w_offset = acc_offset + sizeof(float) * size_t(rows) * head_dim;
    m_offset = w_offset + sizeof(float) * size_t(warps) * rows * 16;
    e_offset = m_offset + sizeof(float) * size_t(warps) * rows;
    pos_offset = e_offset + sizeof(float) * size_t(warps) * rows;
    total = pos_offset + sizeof(int) * size_t(rows);
  }
};

/// The register type that holds N elements of T (4, 8 or 16 bytes).
template <class T, int N>
using raw_of = std::conditional_t<N * sizeof(T) == 16, uint4, std::conditional_t<N * sizeof(T) == 8, uint2, uint32_t>>;

/// The N elements of T in `raw` as floats.
template <class T, int N>
__device__ __forceinline__ void unpack(const raw_of<T, N>& raw, float (&out)[N]) {
  alignas(16) T elements[N];
  memcpy(elements, &raw, sizeof raw);  // registers to registers: no copy survives compilation
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = to_float(elements[i]);
}

/// Maximum and sum over the 16 tokens of a warp (lanes 2t and 2t + 1 hold token t's value).
__device__ __forceinline__ float token_max(float v) {
#pragma unroll
  for (int o = 16; o >= 2; o >>= 1) v = fmaxf(v, __shfl_xor_sync(full_mask, v, o));
  return v;
}
__device__ __forceinline__ float token_sum(float v) {
#pragma unroll
  for (int o = 16; o >= 2; o >>= 1) v += __shfl_xor_sync(full_mask, v, o);
  return v;
}

/// T: KV element type; Rows: most query rows per kv head; VecK: elements per K load; VecV: columns per V
/// load; Slots: column groups of 32 * VecV a lane covers (head_dim <= 32 * VecV * Slots).
template <class T, int Rows, int VecK, int VecV, int Slots>
__global__ void __launch_bounds__(threads, Rows <= 4 ? 4 : 1) decode_kernel(const __grid_constant__ attention_launch a) {
  ILLM_DYNAMIC_SHARED(smem);
  const int hd = a.head_dim, group = a.n_heads / a.n_kv_heads, kv_head = int(blockIdx.y);
  const attention_job_desc& job = a.jobs[find_job(a, int(blockIdx.x))];
  const int split = int(blockIdx.x) - job.item_begin;
  const int b0 = split * job.blocks_per_split, b1 = imin(job.n_blocks, b0 + job.blocks_per_split);
  const int rows = job.n_q * group, tid = int(threadIdx.x), warp = tid >> 5, lane = tid & 31;
  const decode_layout lay(hd, Rows);
  float* q_s = reinterpret_cast<float*>(smem + lay.q_offset);      // [Rows][hd], scaled to base 2
  float* acc_s = reinterpret_cast<float*>(smem + lay.acc_offset);  // [Rows][hd]: the warps' MA, merged
  float* w_s = reinterpret_cast<float*>(smem + lay.w_offset) + size_t(warp) * Rows * 16;  // this warp's weights
  float* m_s = reinterpret_cast<float*>(smem + lay.m_offset);      // [warps][Rows]
  float* e_s = reinterpret_cast<float*>(smem + lay.e_offset);      // [warps][Rows]
  int* pos_s = reinterpret_cast<int*>(smem + lay.pos_offset);      // [Rows]

  // Row r is query token r / group, head kv_head * group + r % group.
  for (int i = tid; i < Rows * hd; i += threads) {
    const int r = i / hd, d = i % hd;
    float x = 0.0f;
    if (r < rows)
      x = job.q[size_t(r / group) * job.q_ld + size_t(kv_head * group + r % group) * hd + d] * a.scale_log2;
    q_s[i] = x;
    acc_s[i] = 0.0f;
  }
  if (tid < Rows) pos_s[tid] = tid < rows ? job.q_pos[tid / group] : -1;
  int max_pos = -1, min_pos = 0x7fffffff;
  for (int t = 0; t < job.n_q; ++t) max_pos = imax(max_pos, job.q_pos[t]), min_pos = imin(min_pos, job.q_pos[t]);
  __syncthreads();

  float m_run[Rows], e_run[Rows], acc[Rows][Slots][VecV];
#pragma unroll
  for (int r = 0; r < Rows; ++r) {
    m_run[r] = -INFINITY;
    e_run[r] = 0.0f;
#pragma unroll
    for (int j = 0; j < Slots; ++j)
#pragma unroll
      for (int c = 0; c < VecV; ++c) acc[r][j][c] = 0.0f;
  }
  const int token = lane >> 1, half = lane & 1, k_chunks = hd / VecK;

  for (int b = b0 + warp; b < b1; b += warps) {
    const int pos0 = job.block_pos[b];
    // No query of the job sees the block: after them all, or older than the earliest one's window.
    if (pos0 > max_pos || (a.window > 0 && pos0 + 15 <= min_pos - a.window)) continue;
    const T* head = static_cast<const T*>(a.kv_base) + size_t(job.blocks[b]) * a.block_stride +
                    size_t(kv_head) * a.head_stride;
    const T* ks = head + a.k_offset + size_t(token) * hd;
    const T* vs = head + a.v_offset;

    // V's loads first, for the keys some row sees (the rest may be unwritten): they are in flight with K's.
    const int n_keys = imin(16, max_pos - pos0 + 1);
    raw_of<T, VecV> v_raw[16][Slots];
#pragma unroll
    for (int u = 0; u < 16; ++u)
#pragma unroll
      for (int j = 0; j < Slots; ++j) {
        const int col = (lane + 32 * j) * VecV;
        v_raw[u][j] = u < n_keys && col < hd ? load_raw<raw_of<T, VecV>>(vs + size_t(u) * hd + col)
                                             : raw_of<T, VecV>{};
      }

    float dot[Rows];  // this lane's share of q.k for its token
#pragma unroll
    for (int r = 0; r < Rows; ++r) dot[r] = 0.0f;
    for (int c0 = half; c0 < k_chunks; c0 += 2 * k_batch) {
      raw_of<T, VecK> k_raw[k_batch];
#pragma unroll
      for (int i = 0; i < k_batch; ++i)
        k_raw[i] = c0 + 2 * i < k_chunks ? load_raw<raw_of<T, VecK>>(ks + (c0 + 2 * i) * VecK) : raw_of<T, VecK>{};
#pragma unroll
      for (int i = 0; i < k_batch; ++i) {
        const int c = c0 + 2 * i;
        if (c >= k_chunks) break;
        float k[VecK];
        unpack<T, VecK>(k_raw[i], k);
#pragma unroll
        for (int r = 0; r < Rows; ++r) {
          if (r >= rows) break;  // the same for the whole block
          float q[VecK];
          load_floats<VecK>(q_s + size_t(r) * hd + c * VecK, q);
#pragma unroll
          for (int v = 0; v < VecK; ++v) dot[r] += q[v] * k[v];
        }
      }
    }

    __syncwarp();  // the weights of the warp's previous block are read
#pragma unroll
    for (int r = 0; r < Rows; ++r) {
      if (r >= rows) break;
      float s = dot[r] + __shfl_xor_sync(full_mask, dot[r], 1);
      s = sees(a, pos0 + token, pos_s[r]) ? s : -INFINITY;
      const float m_new = fmaxf(m_run[r], token_max(s));
      const float p = s == -INFINITY ? 0.0f : exp2f(s - m_new);
      const float corr = m_run[r] == -INFINITY ? 0.0f : exp2f(m_run[r] - m_new);
      e_run[r] = e_run[r] * corr + token_sum(p);
      m_run[r] = m_new;
#pragma unroll
      for (int j = 0; j < Slots; ++j)
#pragma unroll
        for (int c = 0; c < VecV; ++c) acc[r][j][c] *= corr;
      if (half == 0) w_s[r * 16 + token] = p;
    }
    __syncwarp();

#pragma unroll
    for (int u = 0; u < 16; ++u) {
      if (u >= n_keys) break;
#pragma unroll
      for (int j = 0; j < Slots; ++j) {
        if ((lane + 32 * j) * VecV >= hd) continue;
        float v[VecV];
        unpack<T, VecV>(v_raw[u][j], v);
#pragma unroll
        for (int r = 0; r < Rows; ++r) {
          if (r >= rows) break;
          const float w = w_s[r * 16 + u];
#pragma unroll
          for (int c = 0; c < VecV; ++c) acc[r][j][c] += w * v[c];
        }
      }
    }
  }

  // Merge the warps: maxima and exp-sums first, then each warp's MA rescaled to the common maximum.
  if (lane == 0)
#pragma unroll
    for (int r = 0; r < Rows; ++r) {
      m_s[warp * Rows + r] = m_run[r];
      e_s[warp * Rows + r] = e_run[r];
    }
  __syncthreads();
  for (int w = 0; w < warps; ++w) {
    if (warp == w)
#pragma unroll
      for (int r = 0; r < Rows; ++r) {
        if (r >= rows) break;
        float m_all = -INFINITY;
        for (int x = 0; x < warps; ++x) m_all = fmaxf(m_all, m_s[x * Rows + r]);
        const float scale = m_run[r] == -INFINITY ? 0.0f : exp2f(m_run[r] - m_all);
#pragma unroll
        for (int j = 0; j < Slots; ++j)
#pragma unroll
          for (int c = 0; c < VecV; ++c) {
            const int col = (lane + 32 * j) * VecV + c;
            if (col < hd) acc_s[r * hd + col] += acc[r][j][c] * scale;
          }
      }
    __syncthreads();
  }
  for (int i = tid; i < rows * hd; i += threads) {
    const int r = i / hd, d = i % hd;
    const partial_target out = partial_for(a, job, split, (r / group) * a.n_heads + kv_head * group + r % group);
    out.ma[out.index * hd + d] = acc_s[i];
  }
  if (tid < rows) {
    const int r = tid;
    float m_all = -INFINITY, e_all = 0.0f;
    for (int x = 0; x < warps; ++x) m_all = fmaxf(m_all, m_s[x * Rows + r]);
    for (int x = 0; x < warps; ++x)
      if (m_s[x * Rows + r] != -INFINITY) e_all += e_s[x * Rows + r] * exp2f(m_s[x * Rows + r] - m_all);
    const partial_target out = partial_for(a, job, split, (r / group) * a.n_heads + kv_head * group + r % group);
    out.m[out.index] = m_all == -INFINITY ? -INFINITY : m_all * ln2;
    out.e[out.index] = e_all;
  }
}

/// Launches the kernel for T, Rows, VecK, VecV, Slots on `a`, or, when `occupancy` is set, stores how many
/// of its thread blocks fit on one SM for head_dim.
template <class T, int Rows, int VecK, int VecV, int Slots>
cudaError_t run(const attention_launch* a, int head_dim, int* occupancy, cudaStream_t stream) {
  const size_t shared = decode_layout(head_dim, Rows).total;
  auto* kernel = decode_kernel<T, Rows, VecK, VecV, Slots>;
  if (cudaError_t err = allow_shared(kernel, shared); err != cudaSuccess) return err;
  if (occupancy)
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(occupancy, reinterpret_cast<const void*>(kernel), threads,
                                                         shared);
  return launch(kernel, dim3(unsigned(a->n_items), unsigned(a->n_kv_heads)), dim3(threads), shared, stream, *a);
}

/// 16-byte K loads and 4 columns per V load where head_dim allows (a multiple of 128, and of the K load's
/// elements), else 2 elements per load of either.
template <class T, int Rows>
cudaError_t run_vec(const attention_launch* a, int head_dim, int* occupancy, cudaStream_t stream) {
  constexpr int wide = 16 / int(sizeof(T));
  if (head_dim % wide == 0 && head_dim % 128 == 0)
    return head_dim <= 128 ? run<T, Rows, wide, 4, 1>(a, head_dim, occupancy, stream)
                           : run<T, Rows, wide, 4, 2>(a, head_dim, occupancy, stream);
  return run<T, Rows, 2, 2, (head_dim_max + 63) / 64>(a, head_dim, occupancy, stream);
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
    default: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace

size_t decode_attention_shared_bytes(dtype type, int head_dim, int rows) {
  int padded = 1;
  while (padded < rows) padded *= 2;
  (void)type;
  return decode_layout(head_dim, padded).total;
}

cudaError_t decode_attention(const attention_launch& launch, dtype type, int max_rows, cudaStream_t stream) {
  return dispatch(&launch, type, launch.head_dim, max_rows, nullptr, stream);
}

cudaError_t decode_attention_occupancy(dtype type, int head_dim, int max_rows, int* blocks_per_sm) {
  return dispatch(nullptr, type, head_dim, max_rows, blocks_per_sm, nullptr);
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
