// Block copies: grid x spans the pieces of one block, grid y the blocks.
#include "gpu/cuda/kv_copy.cuh"

#include "gpu/cuda/device.cuh"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

constexpr int threads = 256;
constexpr int pieces_per_thread = 4;

__global__ void __launch_bounds__(threads) copy_blocks_kernel(uint4* dst, const uint32_t* dst_ids, const uint4* src,
                                                              const uint32_t* src_ids, size_t pieces) {
  uint4* to = dst + size_t(dst_ids[blockIdx.y]) * pieces;
  const uint4* from = src + size_t(src_ids[blockIdx.y]) * pieces;
  const size_t first = size_t(blockIdx.x) * threads * pieces_per_thread + threadIdx.x;
#pragma unroll
  for (int i = 0; i < pieces_per_thread; ++i) {
    const size_t p = first + size_t(i) * threads;
    if (p < pieces) to[p] = from[p];
  }
}

}  // namespace

cudaError_t copy_blocks(void* dst_base, const uint32_t* dst_ids, const void* src_base, const uint32_t* src_ids, int n,
                        size_t block_bytes, cudaStream_t stream) {
  if (block_bytes % 16 != 0) return cudaErrorInvalidValue;
  const size_t pieces = block_bytes / 16, per_block = size_t(threads) * pieces_per_thread;
  constexpr int grid_y_max = 65535;
  for (int first = 0; first < n; first += grid_y_max) {
    const int count = n - first < grid_y_max ? n - first : grid_y_max;
    const cudaError_t err =
        launch(copy_blocks_kernel, dim3(unsigned((pieces + per_block - 1) / per_block), unsigned(count)),
               dim3(threads), 0, stream, static_cast<uint4*>(dst_base), dst_ids + first,
               static_cast<const uint4*>(src_base), src_ids + first, pieces);
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
