// KV store: one thread per element of K (and the same element of V).
#include "gpu/cuda/store_kv.cuh"

#include "gpu/cuda/device.cuh"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

constexpr int threads = 256;

template <class T>
__global__ void __launch_bounds__(threads) store_kv_kernel(const float* k, const float* v, size_t ld, int m,
                                                           int n_kv_heads, int head_dim, T* base,
                                                           kv_layer_view dst, const uint32_t* slots) {
  const int64_t i = int64_t(blockIdx.x) * threads + threadIdx.x;
  if (i >= int64_t(m) * n_kv_heads * head_dim) return;
  const int d = int(i % head_dim), head = int(i / head_dim % n_kv_heads), token = int(i / head_dim / n_kv_heads);
  const uint32_t slot = slots[token];
  const size_t at = size_t(slot / 16) * dst.block_stride + size_t(head) * dst.head_stride +
                    size_t(slot % 16) * head_dim + d;
  const size_t from = size_t(token) * ld + size_t(head) * head_dim + d;
  base[at + dst.k_offset] = from_float<T>(k[from]);
  base[at + dst.v_offset] = from_float<T>(v[from]);
}

template <class T>
cudaError_t run(const float* k, const float* v, size_t ld, int m, int n_kv_heads, int head_dim,
                const kv_layer_view& dst, const uint32_t* slots, cudaStream_t stream) {
  const int64_t items = int64_t(m) * n_kv_heads * head_dim;
  return launch(store_kv_kernel<T>, dim3(unsigned((items + threads - 1) / threads)), dim3(threads), 0, stream, k, v,
                ld, m, n_kv_heads, head_dim, static_cast<T*>(dst.base), dst, slots);
}

}  // namespace

cudaError_t store_kv(const float* k, const float* v, size_t ld, int m, int n_kv_heads, int head_dim,
                     const kv_layer_view& dst, const uint32_t* slots, cudaStream_t stream) {
  switch (dst.type) {
    case dtype::f32: return run<float>(k, v, ld, m, n_kv_heads, head_dim, dst, slots, stream);
    case dtype::f16: return run<__half>(k, v, ld, m, n_kv_heads, head_dim, dst, slots, stream);
    case dtype::bf16: return run<__nv_bfloat16>(k, v, ld, m, n_kv_heads, head_dim, dst, slots, stream);
    default: break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
