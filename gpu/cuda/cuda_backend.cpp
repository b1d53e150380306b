#include "gpu/cuda/cuda_backend.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "gpu/cuda/argmax.cuh"
#include "gpu/cuda/attention_jobs.hpp"
#include "gpu/cuda/cublas_api.hpp"
#include "gpu/cuda/cuda_check.hpp"
#include "gpu/cuda/decode_attention.cuh"
#include "gpu/cuda/gather_rows.cuh"
#include "gpu/cuda/gemm.cuh"
#include "gpu/cuda/kv_copy.cuh"
#include "gpu/cuda/merge.cuh"
#include "gpu/cuda/prefill_attention.cuh"
#include "gpu/cuda/add_bias.cuh"
#include "gpu/cuda/rmsnorm.cuh"
#include "gpu/cuda/rope.cuh"
#include "gpu/cuda/silu_mul.cuh"
#include "gpu/cuda/store_kv.cuh"
#include "gpu/sampler.hpp"
#include "gpu/text.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

namespace {

/// Fewest blocks a split takes: shorter ranges cost more in merging than they gain in parallelism.
constexpr int min_split_blocks = 4;

}  // namespace

device_probe probe_devices() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it for later calls
    return {0, text::format("cudaGetDeviceCount: {} ({})", cudaGetErrorName(err), cudaGetErrorString(err))};
  }
  if (count == 0) return {0, "cudaGetDeviceCount found no device"};
  return {count, ""};
}

result<std::unique_ptr<cuda_backend>> cuda_backend::create(const cuda_options& options) {
  const device_probe probe = probe_devices();
  if (probe.count == 0) return status{status_code::unsupported, "no CUDA device: " + probe.reason};
  if (options.device < 0 || options.device >= probe.count)
    return status{status_code::invalid_argument,
                  text::format("CUDA device {} asked, {} present", options.device, probe.count)};
  std::unique_ptr<cuda_backend> device(new cuda_backend(options));
  ILLM_RETURN_IF_ERROR(device->open());
  return device;
}

cuda_backend::cuda_backend(const cuda_options& options) : options_(options) {}

namespace {

/// The device made current on this host thread by cuda_backend::bind (-1: none yet).
thread_local int bound_device = -1;

}  // namespace

status cuda_backend::bind() const {
  if (bound_device == options_.device) return status::ok();
  ILLM_RETURN_IF_ERROR(check(cudaSetDevice(options_.device), "cudaSetDevice"));
  bound_device = options_.device;
  return status::ok();
}

status cuda_backend::open() {
  ILLM_RETURN_IF_ERROR(bind());
  cudaDeviceProp prop{};
  ILLM_RETURN_IF_ERROR(check(cudaGetDeviceProperties(&prop, options_.device), "cudaGetDeviceProperties"));
  info_ = {options_.device, prop.name, prop.multiProcessorCount, prop.major, prop.minor, prop.totalGlobalMem,
           prop.sharedMemPerBlockOptin};
  ILLM_RETURN_IF_ERROR(check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
  auto blas = load_cublas();
  if (!blas.is_ok()) return blas.error();
  blas_api_ = blas.value();
  ILLM_RETURN_IF_ERROR(check(blas_api_->create(&blas_), "cublasCreate"));
  ILLM_RETURN_IF_ERROR(check(blas_api_->set_stream(blas_, stream_), "cublasSetStream"));
  ILLM_RETURN_IF_ERROR(check(cudaMallocHost(&staging_, staging_slots * staging_slot_bytes), "cudaMallocHost"));
  for (auto& event : staging_done_)
    ILLM_RETURN_IF_ERROR(check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"));
  launch_ = std::make_unique<attention_launch>();
  return status::ok();
}

cuda_backend::~cuda_backend() {
  (void)bind();
  if (stream_) cudaStreamSynchronize(stream_);
  for (scratch* s : {&gemm_x_, &split_ws_, &ids_, &tokens_})
    if (s->data) cudaFree(s->data);
  for (auto event : staging_done_)
    if (event) cudaEventDestroy(event);
  if (staging_) cudaFreeHost(staging_);
  if (blas_) blas_api_->destroy(blas_);
  if (stream_) cudaStreamDestroy(stream_);
}

void* cuda_backend::allocate(size_t bytes) {
  if (!bind().is_ok()) return nullptr;
  void* p = nullptr;
  if (cudaMalloc(&p, std::max<size_t>(bytes, 1)) != cudaSuccess) {
    cudaGetLastError();  // an allocation failure is an answer, not a sticky error
    return nullptr;
  }
  return p;
}

void cuda_backend::deallocate(void* p) {
  if (!p || !bind().is_ok()) return;
  cudaStreamSynchronize(stream_);  // work queued before may still read it
  cudaFree(p);
}

status cuda_backend::upload(void* dst, const void* host_src, size_t bytes) {
  ILLM_RETURN_IF_ERROR(bind());
  if (bytes == 0) return status::ok();
  ILLM_RETURN_IF_ERROR(device_pointer(dst, "upload destination"));
  if (bytes > staging_slot_bytes) {
    ILLM_RETURN_IF_ERROR(check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_), "upload"));
    return check(cudaStreamSynchronize(stream_), "upload");  // the caller may reuse its buffer at once
  }
  // Small uploads go through a pinned slot, so that they stay asynchronous: the slot is reused only
  // once the copy out of it has completed.
  const int slot = staging_next_;
  staging_next_ = (staging_next_ + 1) % staging_slots;
  ILLM_RETURN_IF_ERROR(check(cudaEventSynchronize(staging_done_[slot]), "upload: staging slot"));
  char* pinned = static_cast<char*>(staging_) + size_t(slot) * staging_slot_bytes;
  std::memcpy(pinned, host_src, bytes);
  ILLM_RETURN_IF_ERROR(check(cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyHostToDevice, stream_), "upload"));
  return check(cudaEventRecord(staging_done_[slot], stream_), "upload: staging slot");
}

status cuda_backend::download(void* host_dst, const void* src, size_t bytes) {
  ILLM_RETURN_IF_ERROR(bind());
  if (bytes == 0) return status::ok();
  ILLM_RETURN_IF_ERROR(device_pointer(src, "download source"));
  ILLM_RETURN_IF_ERROR(check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_), "download"));
  return check(cudaStreamSynchronize(stream_), "download");
}

status cuda_backend::copy(void* dst, const void* src, size_t bytes) {
  ILLM_RETURN_IF_ERROR(bind());
  if (bytes == 0) return status::ok();
  ILLM_RETURN_IF_ERROR(device_pointer(dst, "copy destination"));
  ILLM_RETURN_IF_ERROR(device_pointer(src, "copy source"));
  return check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_), "copy");
}

status cuda_backend::synchronize() {
  ILLM_RETURN_IF_ERROR(bind());
  return check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

status cuda_backend::reserve(scratch& s, size_t bytes, const char* what) {
  if (s.bytes >= bytes) return status::ok();
  if (s.data) {
    ILLM_RETURN_IF_ERROR(check(cudaStreamSynchronize(stream_), what));
    ILLM_RETURN_IF_ERROR(check(cudaFree(s.data), what));
    s = {};
  }
  const size_t grown = std::max(bytes, size_t(4096));
  ILLM_RETURN_IF_ERROR(check(cudaMalloc(&s.data, grown), what));
  s.bytes = grown;
  return status::ok();
}

status cuda_backend::device_pointers(std::initializer_list<std::pair<const void*, const char*>> pointers) const {
  for (const auto& [p, what] : pointers) ILLM_RETURN_IF_ERROR(device_pointer(p, what));
  return status::ok();
}

status cuda_backend::device_pointer(const void* p, const char* what) const {
  if (!options_.check_pointers || !p) return status::ok();
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) cudaGetLastError();
  if (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged) return status::ok();
  return {status_code::invalid_argument, text::format("{}: host memory where the cuda backend needs device memory",
                                                      what)};
}

status cuda_backend::stage(scratch& s, const void* host, size_t bytes, const char* what) {
  ILLM_RETURN_IF_ERROR(reserve(s, bytes, what));
  return upload(s.data, host, bytes);
}

status cuda_backend::copy_blocks(void* dst_base, const uint32_t* dst_ids, const void* src_base,
                                 const uint32_t* src_ids, int n, size_t block_bytes) {
  ILLM_RETURN_IF_ERROR(bind());
  if (n <= 0) return status::ok();
  ILLM_RETURN_IF_ERROR(device_pointer(dst_base, "copy_blocks destination"));
  ILLM_RETURN_IF_ERROR(device_pointer(src_base, "copy_blocks source"));
  host_ints_.resize(2 * size_t(n));
  std::memcpy(host_ints_.data(), dst_ids, sizeof(uint32_t) * size_t(n));
  std::memcpy(host_ints_.data() + n, src_ids, sizeof(uint32_t) * size_t(n));
  ILLM_RETURN_IF_ERROR(stage(ids_, host_ints_.data(), sizeof(uint32_t) * 2 * size_t(n), "copy_blocks: ids"));
  const auto* ids = static_cast<const uint32_t*>(ids_.data);
  return check(cuda::copy_blocks(dst_base, ids, src_base, ids + n, n, block_bytes, stream_), "copy_blocks");
}

status cuda_backend::copy_blocks_to_gpu(int dst_gpu, void* dst_base, const uint32_t* dst_ids, const void* src_base,
                                        const uint32_t* src_ids, int n, size_t block_bytes) {
  ILLM_RETURN_IF_ERROR(bind());
  if (dst_gpu == options_.device) return copy_blocks(dst_base, dst_ids, src_base, src_ids, n, block_bytes);
  ILLM_RETURN_IF_ERROR(device_pointer(src_base, "copy_blocks_to_gpu source"));
  ILLM_RETURN_IF_ERROR(enable_peer(dst_gpu));
  for (int i = 0; i < n; ++i)
    ILLM_RETURN_IF_ERROR(check(cudaMemcpyPeerAsync(block_at(dst_base, dst_ids[i], block_bytes), dst_gpu,
                                                   block_at(src_base, src_ids[i], block_bytes),
                                                   options_.device, block_bytes, stream_),
                               "cudaMemcpyPeerAsync"));
  return status::ok();
}

status cuda_backend::enable_peer(int gpu) {
  std::lock_guard lock(peers_mutex_);
  if (!peers_seen_.insert(gpu).second) return status::ok();
  int can = 0;
  ILLM_RETURN_IF_ERROR(check(cudaDeviceCanAccessPeer(&can, options_.device, gpu), "cudaDeviceCanAccessPeer"));
  if (!can) return status::ok();  // cudaMemcpyPeerAsync stages through the host
  const cudaError_t err = cudaDeviceEnablePeerAccess(gpu, 0);
  if (err == cudaErrorPeerAccessAlreadyEnabled) {  // another backend of this GPU enabled it: context-wide
    cudaGetLastError();
    return status::ok();
  }
  return check(err, "cudaDeviceEnablePeerAccess");
}

status cuda_backend::download_blocks(void* host_dst, const void* src_base, const uint32_t* src_ids, int n,
                                     size_t block_bytes) {
  ILLM_RETURN_IF_ERROR(bind());
  ILLM_RETURN_IF_ERROR(device_pointer(src_base, "download_blocks source"));
  for (int i = 0; i < n; ++i)
    ILLM_RETURN_IF_ERROR(check(cudaMemcpyAsync(block_at(host_dst, uint32_t(i), block_bytes),
                                               block_at(src_base, src_ids[i], block_bytes),
                                               block_bytes, cudaMemcpyDeviceToHost, stream_),
                               "download_blocks"));
  // A test switch (ILLM_CUDA_TEST_DROP_STAGING_WAIT set): return before the copies land, as code that forgot the
  // wait would. The CUDA emulation's asynchronous streams make the moves it stages fail their checksums
  // (a CTest entry that must fail shows it); never set in a service.
  static const bool drop_wait = std::getenv("ILLM_CUDA_TEST_DROP_STAGING_WAIT") != nullptr;
  if (drop_wait) return status::ok();
  return check(cudaStreamSynchronize(stream_), "download_blocks");
}

status cuda_backend::upload_blocks(void* dst_base, const uint32_t* dst_ids, const void* host_base,
                                   const uint32_t* src_ids, int n, size_t block_bytes) {
  ILLM_RETURN_IF_ERROR(bind());
  ILLM_RETURN_IF_ERROR(device_pointer(dst_base, "upload_blocks destination"));
  for (int i = 0; i < n; ++i)
    ILLM_RETURN_IF_ERROR(check(cudaMemcpyAsync(block_at(dst_base, dst_ids[i], block_bytes),
                                               block_at(host_base, src_ids[i], block_bytes),
                                               block_bytes, cudaMemcpyHostToDevice, stream_),
                               "upload_blocks"));
  return check(cudaStreamSynchronize(stream_), "upload_blocks");
}

void* cuda_backend::allocate_host(size_t bytes) {
  void* p = nullptr;
  if (!bind().is_ok()) return nullptr;
  return cudaMallocHost(&p, bytes) == cudaSuccess ? p : nullptr;
}

void cuda_backend::deallocate_host(void* p) {
  if (p) cudaFreeHost(p);
}

status cuda_backend::gemm(const float* x, size_t ldx, int m, int k, const void* w, dtype w_type, size_t ldw, int n,
                          float* y, size_t ldy, bool accumulate) {
  ILLM_RETURN_IF_ERROR(bind());
  if (m < 0 || n < 0 || k <= 0 || ldx < size_t(k) || ldw < size_t(k) || ldy < size_t(n))
    return {status_code::invalid_argument, text::format("gemm of m {} n {} k {} with ldx {} ldw {} ldy {}", m, n, k,
                                                        ldx, ldw, ldy)};
  if (!computes_with(w_type))
    return {status_code::unsupported, text::format("cuda products read f32, f16 or bf16 weights, not {}", to_string(w_type))};
  ILLM_RETURN_IF_ERROR(device_pointers({{x, "gemm x"}, {w, "gemm w"}, {y, "gemm y"}}));
  if (w_type != dtype::f32) ILLM_RETURN_IF_ERROR(reserve(gemm_x_, size_t(m) * k * 2, "gemm: converted x"));
  return cuda::gemm(*blas_api_, blas_, stream_, x, ldx, m, k, w, w_type, ldw, n, y, ldy, accumulate, gemm_x_.data);
}

status cuda_backend::rmsnorm(const float* x, size_t ldx, const float* weight, int m, int n, float eps, float* y,
                             size_t ldy) {
  ILLM_RETURN_IF_ERROR(bind());
  ILLM_RETURN_IF_ERROR(device_pointers({{x, "rmsnorm x"}, {weight, "rmsnorm weight"}, {y, "rmsnorm y"}}));
  return check(cuda::rmsnorm(x, ldx, weight, m, n, eps, y, ldy, stream_), "rmsnorm");
}

status cuda_backend::head_rmsnorm(float* x, size_t ld, int m, int n_heads, int head_dim, const float* weight,
                                  float eps) {
  ILLM_RETURN_IF_ERROR(bind());
  ILLM_RETURN_IF_ERROR(device_pointers({{x, "head_rmsnorm x"}, {weight, "head_rmsnorm weight"}}));
  return check(cuda::head_rmsnorm(x, ld, m, n_heads, head_dim, weight, eps, stream_), "head_rmsnorm");
}

status cuda_backend::add_bias(float* x, size_t ld, int m, int n, const float* bias) {
  ILLM_RETURN_IF_ERROR(bind());
  ILLM_RETURN_IF_ERROR(device_pointers({{x, "add_bias x"}, {bias, "add_bias bias"}}));
  return check(cuda::add_bias(x, ld, m, n, bias, stream_), "add_bias");
}

status cuda_backend::rope_table(const int32_t* pos, int m, int head_dim, const rope_frequencies& freq, float* table) {
  ILLM_RETURN_IF_ERROR(bind());
  ILLM_RETURN_IF_ERROR(device_pointer(pos, "rope_table positions"));
  ILLM_RETURN_IF_ERROR(device_pointer(table, "rope_table table"));
  return check(cuda::rope_table(pos, m, head_dim, freq, table, stream_), "rope_table");
}

status cuda_backend::rope(float* x, size_t ld, int m, int n_heads, int head_dim, const float* table) {
  ILLM_RETURN_IF_ERROR(bind());
  ILLM_RETURN_IF_ERROR(device_pointer(x, "rope x"));
  ILLM_RETURN_IF_ERROR(device_pointer(table, "rope table"));
  return check(cuda::rope(x, ld, m, n_heads, head_dim, table, stream_), "rope");
}

status cuda_backend::silu_mul(const float* gate, const float* up, size_t ld_in, int m, int n, float* out,
                              size_t ld_out, const gated_activation& act) {
  ILLM_RETURN_IF_ERROR(bind());
  ILLM_RETURN_IF_ERROR(device_pointers({{gate, "silu_mul gate"}, {up, "silu_mul up"}, {out, "silu_mul out"}}));
  return check(cuda::silu_mul(gate, up, ld_in, m, n, out, ld_out, act, stream_), "silu_mul");
}

status cuda_backend::embed(const int32_t* tokens, int m, const void* table, dtype type, int dim, float* out,
                           size_t ld_out) {
  ILLM_RETURN_IF_ERROR(bind());
  if (!computes_with(type))
    return {status_code::unsupported, text::format("cuda embedding tables are f32, f16 or bf16, not {}", to_string(type))};
  ILLM_RETURN_IF_ERROR(device_pointers({{table, "embed table"}, {tokens, "embed tokens"}, {out, "embed out"}}));
  return check(cuda::gather_rows(table, type, size_t(dim), tokens, m, dim, out, ld_out, stream_), "embed");
}

status cuda_backend::gather_rows(const float* src, size_t ld_src, const int32_t* rows, int n, int width, float* dst,
                                 size_t ld_dst) {
  ILLM_RETURN_IF_ERROR(bind());
  ILLM_RETURN_IF_ERROR(
      device_pointers({{src, "gather_rows source"}, {rows, "gather_rows rows"}, {dst, "gather_rows destination"}}));
  return check(cuda::gather_rows(src, ld_src, rows, n, width, dst, ld_dst, stream_), "gather_rows");
}

status cuda_backend::add_weighted_rows(const float* src, size_t ld_src, const int32_t* slots, const float* weights, int m,
                                  int k, int width, float* dst, size_t ld_dst) {
  ILLM_RETURN_IF_ERROR(bind());
  ILLM_RETURN_IF_ERROR(device_pointers({{src, "add_weighted_rows source"}, {slots, "add_weighted_rows slots"},
                                        {weights, "add_weighted_rows weights"}, {dst, "add_weighted_rows destination"}}));
  return check(cuda::add_weighted_rows(src, ld_src, slots, weights, m, k, width, dst, ld_dst, stream_), "add_weighted_rows");
}

status cuda_backend::store_kv(const float* k, const float* v, size_t ld, int m, int n_kv_heads, int head_dim,
                              const kv_layer_view& dst, const uint32_t* slots) {
  ILLM_RETURN_IF_ERROR(bind());
  ILLM_RETURN_IF_ERROR(
      device_pointers({{k, "store_kv k"}, {v, "store_kv v"}, {dst.base, "store_kv pool"}, {slots, "store_kv slots"}}));
  return check(cuda::store_kv(k, v, ld, m, n_kv_heads, head_dim, dst, slots, stream_), "store_kv");
}

status cuda_backend::merge(const float* m, const float* e, const float* ma, int n_parts, int n_q, int n_heads,
                           int head_dim, float* out, size_t out_ld, const float* sinks) {
  ILLM_RETURN_IF_ERROR(bind());
  ILLM_RETURN_IF_ERROR(device_pointers({{m, "merge m"}, {e, "merge e"}, {ma, "merge ma"}, {out, "merge out"}}));
  if (sinks) ILLM_RETURN_IF_ERROR(device_pointer(sinks, "merge sinks"));
  return check(merge_partials(m, e, ma, n_parts, n_q, n_heads, head_dim, out, out_ld, sinks, stream_), "merge");
}

status cuda_backend::sample(const float* logits, size_t ld, int n, int vocab, const sampling_params* params,
                            uint64_t* rng, int32_t* out) {
  ILLM_RETURN_IF_ERROR(bind());
  if (n <= 0) return status::ok();
  ILLM_RETURN_IF_ERROR(device_pointer(logits, "sample logits"));
  // Greedy rows: argmax on the device, n ints come back. Other rows: their logits come back and the
  // host sampler (temperature, top-p, the request's seeded stream) picks, as the cpu backend does.
  const bool any_greedy =
      std::any_of(params, params + n, [](const sampling_params& p) { return p.temperature <= 0.0f; });
  if (any_greedy) {
    ILLM_RETURN_IF_ERROR(reserve(tokens_, sizeof(int32_t) * size_t(n), "sample: tokens"));
    auto* tokens = static_cast<int32_t*>(tokens_.data);
    ILLM_RETURN_IF_ERROR(check(argmax_rows(logits, ld, n, vocab, tokens, stream_), "argmax"));
    host_ints_.resize(size_t(n));
    ILLM_RETURN_IF_ERROR(download(host_ints_.data(), tokens, sizeof(int32_t) * size_t(n)));
  }
  host_logits_.resize(size_t(vocab));
  for (int i = 0; i < n; ++i) {
    if (params[i].temperature <= 0.0f) {
      out[i] = int32_t(host_ints_[size_t(i)]);
      continue;
    }
    ILLM_RETURN_IF_ERROR(download(host_logits_.data(), logits + size_t(i) * ld, sizeof(float) * size_t(vocab)));
    out[i] = sample_token(host_logits_.data(), vocab, params[i], rng[i]);
  }
  return status::ok();
}

status cuda_backend::micro_attention_batch(const attention_shape& shape, const kv_layer_view& kv,
                                           std::span<const attention_job> jobs) {
  ILLM_RETURN_IF_ERROR(bind());
  if (shape.n_kv_heads <= 0 || shape.n_heads % shape.n_kv_heads != 0)
    return {status_code::invalid_argument, "n_heads must be a multiple of n_kv_heads"};
  if (shape.head_dim <= 0 || shape.head_dim % 2 != 0 || shape.head_dim > head_dim_max)
    return {status_code::unsupported,
            text::format("cuda attention takes an even head_dim up to {}, not {}", head_dim_max, shape.head_dim)};
  // Each K or V run is copied in 16-byte pieces: the arena and every run must be 16-byte aligned.
  const size_t eb = dtype_bytes(kv.type);
  if (reinterpret_cast<uintptr_t>(kv.base) % 16 != 0 || (kv.block_stride * eb) % 16 != 0 ||
      (kv.k_offset * eb) % 16 != 0 || (kv.v_offset * eb) % 16 != 0 || (kv.head_stride * eb) % 16 != 0)
    return {status_code::unsupported, "cuda attention needs 16-byte aligned KV runs"};
  ILLM_RETURN_IF_ERROR(device_pointer(kv.base, "attention KV pool"));
  const int group = shape.n_heads / shape.n_kv_heads;
  std::vector<int> decode, prefill;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].n_q <= 0) continue;
    (jobs[i].n_q * group <= decode_rows_max ? decode : prefill).push_back(int(i));
  }
  for (size_t i = 0; i < decode.size(); i += max_jobs_per_launch)
    ILLM_RETURN_IF_ERROR(attend(shape, kv, jobs,
                                std::span<const int>(decode).subspan(i, std::min<size_t>(max_jobs_per_launch,
                                                                                          decode.size() - i)),
                                true));
  for (size_t i = 0; i < prefill.size(); i += max_jobs_per_launch)
    ILLM_RETURN_IF_ERROR(attend(shape, kv, jobs,
                                std::span<const int>(prefill).subspan(i, std::min<size_t>(max_jobs_per_launch,
                                                                                           prefill.size() - i)),
                                false));
  return status::ok();
}

status cuda_backend::attend(const attention_shape& shape, const kv_layer_view& kv, std::span<const attention_job> jobs,
                            std::span<const int> ids, bool decode) {
  attention_launch& a = *launch_;
  a.kv_base = kv.base;
  a.block_stride = kv.block_stride;
  a.k_offset = kv.k_offset;
  a.v_offset = kv.v_offset;
  a.head_stride = kv.head_stride;
  a.n_heads = shape.n_heads;
  a.n_kv_heads = shape.n_kv_heads;
  a.head_dim = shape.head_dim;
  a.window = shape.window;
  a.n_jobs = int(ids.size());
  a.scale_log2 = float(1.4426950408889634 / std::sqrt(double(shape.head_dim)));
  const int group = shape.n_heads / shape.n_kv_heads;
  std::vector<int> tiles(ids.size());
  int max_rows = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    const attention_job& j = jobs[size_t(ids[i])];
    ILLM_RETURN_IF_ERROR(device_pointers({{j.q, "attention q"},
                                          {j.q_pos, "attention q_pos"},
                                          {j.blocks, "attention blocks"},
                                          {j.block_pos, "attention block_pos"},
                                          {j.m, "attention m"},
                                          {j.e, "attention e"},
                                          {j.ma, "attention ma"}}));
    a.jobs[i] = {j.q, j.q_pos, j.blocks, j.block_pos, j.m, j.e, j.ma, nullptr, j.q_ld, j.n_q, j.n_blocks, 0, 1, 1, 0};
    const int rows = j.n_q * group;
    max_rows = std::max(max_rows, rows);
    tiles[i] = decode ? 1 : (rows + prefill_rows_per_tile(shape.head_dim) - 1) / prefill_rows_per_tile(shape.head_dim);
  }
  size_t workspace_floats = 0;
  ILLM_RETURN_IF_ERROR(plan_splits(a, tiles, decode, kv.type, workspace_floats));
  ILLM_RETURN_IF_ERROR(reserve(split_ws_, workspace_floats * sizeof(float), "attention: split workspace"));
  int max_split_rows = 0;
  size_t offset = 0;
  for (int i = 0; i < a.n_jobs; ++i) {
    attention_job_desc& d = a.jobs[i];
    if (d.n_splits == 1) continue;
    const size_t rows = size_t(d.n_q) * shape.n_heads;
    d.split_ws = static_cast<float*>(split_ws_.data) + offset;
    offset += size_t(d.n_splits) * rows * (2 + size_t(shape.head_dim));
    max_split_rows = std::max(max_split_rows, int(rows));
  }
  const cudaError_t err =
      decode ? decode_attention(a, kv.type, max_rows, stream_) : prefill_attention(a, kv.type, stream_);
  ILLM_RETURN_IF_ERROR(check(err, decode ? "decode attention" : "prefill attention"));
  if (max_split_rows > 0) ILLM_RETURN_IF_ERROR(check(combine_splits(a, max_split_rows, stream_), "combine splits"));
  return status::ok();
}

result<int> cuda_backend::resident_blocks(dtype kv_type, int head_dim, int decode_rows) {
  const int key = (int(kv_type) * 512 + head_dim) * 32 + decode_rows;
  if (auto it = occupancy_.find(key); it != occupancy_.end()) return it->second;
  int blocks = 0;
  const cudaError_t err = decode_rows > 0 ? decode_attention_occupancy(kv_type, head_dim, decode_rows, &blocks)
                                          : prefill_attention_occupancy(kv_type, head_dim, &blocks);
  ILLM_RETURN_IF_ERROR(check(err, "attention occupancy"));
  blocks = std::max(blocks, 1);
  occupancy_[key] = blocks;
  return blocks;
}

status cuda_backend::plan_splits(attention_launch& a, std::span<const int> tiles, bool decode, dtype kv_type,
                                 size_t& workspace_floats) {
  // Enough thread blocks to fill the device once; long jobs are cut into block ranges to get there.
  const int group = a.n_heads / a.n_kv_heads;
  int rows_max = 1;
  for (int i = 0; i < a.n_jobs; ++i) rows_max = std::max(rows_max, a.jobs[i].n_q * group);
  auto resident = resident_blocks(kv_type, a.head_dim, decode ? std::min(rows_max, decode_rows_max) : 0);
  if (!resident.is_ok()) return resident.error();
  const int64_t target = int64_t(info_.sm_count) * resident.value();
  int64_t base_blocks = 0, work = 0;
  int longest = 0;
  for (int i = 0; i < a.n_jobs; ++i) {
    base_blocks += int64_t(tiles[size_t(i)]) * a.n_kv_heads;
    work += int64_t(tiles[size_t(i)]) * std::max(1, a.jobs[i].n_blocks) * a.n_kv_heads;
    longest = std::max(longest, a.jobs[i].n_blocks);
  }
  int per_split = std::max(longest, 1);
  if (base_blocks < target) per_split = int(std::max<int64_t>(min_split_blocks, (work + target - 1) / target));
  int64_t item = 0;
  workspace_floats = 0;
  for (int i = 0; i < a.n_jobs; ++i) {
    attention_job_desc& d = a.jobs[i];
    d.n_tiles = tiles[size_t(i)];
    d.n_splits = std::max(1, (d.n_blocks + per_split - 1) / per_split);
    d.blocks_per_split = d.n_splits == 1 ? d.n_blocks : per_split;
    d.item_begin = int32_t(item);
    item += int64_t(d.n_tiles) * d.n_splits;
    if (d.n_splits > 1)
      workspace_floats += size_t(d.n_splits) * size_t(d.n_q) * a.n_heads * (2 + size_t(a.head_dim));
  }
  if (item > (int64_t(1) << 31) - 1) return {status_code::invalid_argument, "attention launch too large"};
  a.n_items = int32_t(item);
  return status::ok();
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
