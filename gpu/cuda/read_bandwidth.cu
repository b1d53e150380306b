// Streaming read: eight 16-byte loads in flight per thread per step, folded with xor.
#include "gpu/cuda/read_bandwidth.cuh"

#include "gpu/cuda/device.cuh"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

constexpr int threads = 512;
constexpr int unroll = 8;

__global__ void __launch_bounds__(threads) read_kernel(const uint4* data, size_t pieces, uint4* sink) {
  uint4 acc{0u, 0u, 0u, 0u};
  const size_t stride = size_t(gridDim.x) * threads;
  size_t i = size_t(blockIdx.x) * threads + threadIdx.x;
  for (; i + (unroll - 1) * stride < pieces; i += unroll * stride) {
    uint4 v[unroll];
#pragma unroll
    for (int u = 0; u < unroll; ++u) v[u] = data[i + u * stride];
#pragma unroll
    for (int u = 0; u < unroll; ++u) {
      acc.x ^= v[u].x;
      acc.y ^= v[u].y;
      acc.z ^= v[u].z;
      acc.w ^= v[u].w;
    }
  }
  for (; i < pieces; i += stride) {
    acc.x ^= data[i].x;
    acc.y ^= data[i].y;
    acc.z ^= data[i].z;
    acc.w ^= data[i].w;
  }
  if (acc.x == 0x9e3779b9u && acc.y == 0x7f4a7c15u) *sink = acc;
}

}  // namespace

cudaError_t read_bandwidth(const void* data, size_t bytes, int sm_count, uint4* sink, cudaStream_t stream) {
  if (bytes % 16 != 0) return cudaErrorInvalidValue;
  // Enough resident threads to keep every SM's memory pipeline full, and no more (no tail).
  const unsigned blocks = unsigned(sm_count * (2048 / threads));
  return launch(read_kernel, dim3(blocks), dim3(threads), 0, stream, static_cast<const uint4*>(data), bytes / 16,
                sink);
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
