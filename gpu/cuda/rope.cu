// RoPE: one thread per (token, pair) for the table, per (token, head, pair) for the rotation.
#include "gpu/cuda/rope.cuh"

#include "gpu/cuda/device.cuh"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

constexpr int threads = 256;

__global__ void __launch_bounds__(threads) rope_table_kernel(const int32_t* pos, int m, int head_dim,
                                                             rope_frequencies freq, float* table) {
  const int pairs = head_dim / 2;
  const int64_t i = int64_t(blockIdx.x) * threads + threadIdx.x;
  if (i >= int64_t(m) * pairs) return;
  const int token = int(i / pairs), pair = int(i % pairs);
  // fp64 throughout, as the cpu backend: the angle grows with the position, fp32 would lose it.
  const double angle = double(pos[token]) * freq.inverse(pair, head_dim);
  double s, c;
  sincos(angle, &s, &c);
  const double magnitude = freq.magnitude();
  table[2 * i] = float(magnitude * c);
  table[2 * i + 1] = float(magnitude * s);
}

__global__ void __launch_bounds__(threads) rope_kernel(float* x, size_t ld, int m, int n_heads, int head_dim,
                                                       const float* table) {
  const int pairs = head_dim / 2;
  const int64_t i = int64_t(blockIdx.x) * threads + threadIdx.x;
  if (i >= int64_t(m) * n_heads * pairs) return;
  const int pair = int(i % pairs), head = int(i / pairs % n_heads), token = int(i / pairs / n_heads);
  float* v = x + size_t(token) * ld + size_t(head) * head_dim + 2 * pair;
  const float c = table[(size_t(token) * pairs + pair) * 2], s = table[(size_t(token) * pairs + pair) * 2 + 1];
  const float a = v[0], b = v[1];
  v[0] = a * c - b * s;
  v[1] = a * s + b * c;
}

unsigned blocks_for(int64_t items) { return unsigned((items + threads - 1) / threads); }

}  // namespace

cudaError_t rope_table(const int32_t* pos, int m, int head_dim, const rope_frequencies& freq, float* table,
                       cudaStream_t stream) {
  return launch(rope_table_kernel, dim3(blocks_for(int64_t(m) * (head_dim / 2))), dim3(threads), 0, stream, pos, m,
                head_dim, freq, table);
}

cudaError_t rope(float* x, size_t ld, int m, int n_heads, int head_dim, const float* table, cudaStream_t stream) {
  return launch(rope_kernel, dim3(blocks_for(int64_t(m) * n_heads * (head_dim / 2))), dim3(threads), 0, stream, x,
                ld, m, n_heads, head_dim, table);
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
