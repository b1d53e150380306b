#pragma once
// The cuda backend: device memory from cudaMalloc; one stream that every kernel, copy and cuBLAS call
// of the backend is ordered on; the kernels of gpu/cuda and cuBLAS products. KV pools may hold f32, f16
// or bf16 (attention reads them with fp32 arithmetic); weights may be f32, f16 or bf16 (products
// accumulate in fp32). Temperature sampling runs on the host from downloaded logits; greedy sampling
// runs on the device. This header needs no CUDA header.

#include <cstdint>
#include <map>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "gpu/backend.hpp"
#include "gpu/cuda/abi.hpp"

struct CUstream_st;
struct CUevent_st;
struct cublasContext;

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

struct attention_launch;
struct cublas_api;

/// Whether this process can use a GPU: how many devices, or why there is none.
struct device_probe {
  int count = 0;
  std::string reason;  ///< when count is 0: cudaGetDeviceCount's answer (e.g. cudaErrorInsufficientDriver)
};

/// Asks the CUDA runtime for devices; never fails (no driver or no device gives count 0 and a reason).
device_probe probe_devices();

/// What the backend knows of its device.
struct device_info {
  int index = 0;
  std::string name;
  int sm_count = 0;
  int major = 0, minor = 0;          ///< compute capability
  uint64_t total_bytes = 0;          ///< device memory
  uint64_t shared_per_block_optin = 0;
};

/// How to make a cuda backend.
struct cuda_options {
  int device = 0;
  /// Every op checks that its pointer arguments are device memory (cudaPointerGetAttributes), which
  /// catches host pointers handed to kernels; for tests, it costs a call per pointer.
  bool check_pointers = false;
};

/// The cuda backend. One thread at a time calls it (its launch table and scratch are per backend).
class cuda_backend final : public backend {
 public:
  /// Opens `options.device`; unsupported when this process has no usable GPU (the reason says why).
  static result<std::unique_ptr<cuda_backend>> create(const cuda_options& options = {});
  ~cuda_backend() override;
  cuda_backend(const cuda_backend&) = delete;
  cuda_backend& operator=(const cuda_backend&) = delete;

  std::string name() const override { return "cuda"; }
  bool host_memory() const override { return false; }
  const device_info& info() const { return info_; }
  /// The stream every call of this backend is ordered on.
  CUstream_st* stream() const { return stream_; }

  ILLM_BACKEND_MEMORY_OPERATIONS;
  status synchronize() override;
  void* allocate_host(size_t bytes) override;
  void deallocate_host(void* p) override;
  status copy_blocks_to_gpu(int dst_gpu, void* dst_base, const uint32_t* dst_ids, const void* src_base,
                            const uint32_t* src_ids, int n, size_t block_bytes) override;
  status copy_blocks(void* dst_base, const uint32_t* dst_ids, const void* src_base, const uint32_t* src_ids, int n,
                     size_t block_bytes) override;
  status download_blocks(void* host_dst, const void* src_base, const uint32_t* src_ids, int n,
                         size_t block_bytes) override;
  status upload_blocks(void* dst_base, const uint32_t* dst_ids, const void* host_base, const uint32_t* src_ids, int n,
                       size_t block_bytes) override;

  bool computes_with(dtype t) const override { return t == dtype::f32 || t == dtype::f16 || t == dtype::bf16; }
  ILLM_BACKEND_KERNELS;

 private:
  /// Device memory that grows on demand (the old buffer is freed after the stream drains).
  struct scratch {
    void* data = nullptr;
    size_t bytes = 0;
  };

  explicit cuda_backend(const cuda_options& options);
  status open();
  /// Makes this backend's GPU current on the calling thread. CUDA's current device is per host thread and the
  /// runtime calls a backend from whichever thread runs its actor, so every call that touches the device
  /// binds first (a thread-local compare when it is already current).
  status bind() const;
  /// Lets this GPU reach `gpu`'s memory directly where the two can (once per GPU; a no-op where they cannot).
  status enable_peer(int gpu);
  /// At least `bytes` of `s`.
  status reserve(scratch& s, size_t bytes, const char* what);
  /// invalid_argument naming `what` when p is neither null nor device memory (with check_pointers).
  status device_pointer(const void* p, const char* what) const;
  /// device_pointer of each (pointer, what), the first refusal.
  status device_pointers(std::initializer_list<std::pair<const void*, const char*>> pointers) const;
  /// Uploads host data into `s` (grown as needed) through the pinned staging ring.
  status stage(scratch& s, const void* host, size_t bytes, const char* what);
  /// Fills and runs one launch of the decode (or prefill) kernel over `ids`, then combines splits.
  status attend(const attention_shape& shape, const kv_layer_view& kv, std::span<const attention_job> jobs,
                std::span<const int> ids, bool decode);
  /// Thread blocks of the attention kernel (decode for decode_rows > 0, else prefill) resident per SM.
  result<int> resident_blocks(dtype kv_type, int head_dim, int decode_rows);
  /// Splits each job of the launch into block ranges so that the grid fills the device.
  status plan_splits(attention_launch& launch, std::span<const int> tiles, bool decode, dtype kv_type,
                     size_t& workspace_floats);

  cuda_options options_;
  device_info info_;
  CUstream_st* stream_ = nullptr;
  const cublas_api* blas_api_ = nullptr;  // opened at run time (see cublas_api.hpp)
  cublasContext* blas_ = nullptr;
  // Pinned staging ring for small uploads: a slot is reused once the copy out of it has completed.
  static constexpr int staging_slots = 8;
  static constexpr size_t staging_slot_bytes = size_t(1) << 20;
  void* staging_ = nullptr;
  CUevent_st* staging_done_[staging_slots] = {};
  int staging_next_ = 0;
  scratch gemm_x_, split_ws_, ids_, tokens_;
  std::unique_ptr<attention_launch> launch_;  // the kernel-parameter table, filled per launch
  std::map<int, int> occupancy_;               // resident_blocks, by kernel configuration
  std::vector<float> host_logits_;
  std::vector<int32_t> host_ints_;
  std::mutex peers_mutex_;
  std::set<int> peers_seen_;  // GPUs enable_peer was asked for (under peers_mutex_)
};

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
