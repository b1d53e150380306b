#pragma once
// A CPU emulation of the part of the CUDA runtime, cuBLAS and the device language that gpu/cuda uses,
// so that the kernels and the cuda backend run, unchanged, on a machine without a GPU. Kernels run one
// thread block at a time, each GPU thread a fiber: __syncthreads, __syncwarp and the shuffles are
// barriers, and the emulator stops the program with a message on the mistakes a GPU punishes silently:
// a barrier or shuffle that not every thread (or lane) reaches, a misaligned vector load, a cp.async
// copy read before its wait, device memory touched by host code (it is mapped inaccessible outside
// kernels and copies), a host pointer given to a copy or a GEMM as device memory.
//
// Streams run asynchronously, as on a GPU: each stream has a thread of its own that runs the stream's work in
// order (launches, copies, GEMMs, event records), each piece after a random delay drawn from a seed
// (set_stream_delay: ILLM_EMU_SEED and ILLM_EMU_MAX_DELAY_US), one piece at a time in the whole emulation;
// cudaStreamSynchronize, cudaDeviceSynchronize and cudaEventSynchronize wait for that work, and cudaFree waits
// for every stream, as CUDA's does. Host code that reads a result before its wait reads what was there before
// (a pinned buffer's old bytes): missing synchronisation shows as wrong data. Copies from pageable host memory
// take their bytes when called, and copies into it return once done, as CUDA's do. Work on the default stream
// (a null stream) runs at once on the caller's thread. Device memory is open to the whole process while any
// piece of work runs (mprotect is per process): host code racing a kernel is not caught then.
//
// The sources see it through the stub headers in include/ (cuda_runtime.h, cublas_v2.h, ...), with
// ILLM_CUDA_EMULATION=1. Names live in namespace illm_emu, brought in by a using-directive, so that a
// binary may also link the real CUDA runtime.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "gpu/half.hpp"

// ---- The device language ----------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define __shared__ static
#define __align__(n) alignas(n)
#define __restrict__ __restrict

// Opaque handles, global as in the real headers (gpu/cuda/cuda_backend.hpp declares them there).
struct CUstream_st;
struct CUevent_st;
struct cublasContext;

namespace illm_emu {

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

struct alignas(16) uint4 {
  unsigned x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) float2 {
  float x, y;
};

struct __half {
  uint16_t bits;
};
struct __nv_bfloat16 {
  uint16_t bits;
};
inline float __half2float(__half h) { return illm::gpu::f16_to_float(h.bits); }
inline __half __float2half_rn(float f) { return {illm::gpu::float_to_f16(f)}; }
inline float __bfloat162float(__nv_bfloat16 h) { return illm::gpu::bf16_to_float(h.bits); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {illm::gpu::float_to_bf16(f)}; }

/// The running GPU thread's indices.
struct thread_indices {
  dim3 thread_idx, block_idx, block_dim, grid_dim;
};
thread_indices& current_indices();

[[noreturn]] void fail(const char* what);
[[noreturn]] inline void fail(const std::string& what) { fail(what.c_str()); }

/// Barriers and data exchange between the fibers of a block.
void sync_block();
void sync_warp();
/// Puts `bits` in this lane's slot, waits for the warp, returns the bits of lane `source`.
uint64_t exchange(uint64_t bits, int source);
int lane_id();

template <class T>
T shuffle_from(T value, int source) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof value);
  bits = exchange(bits, source);
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

/// Queues a cp.async copy of this thread; it lands at the matching __pipeline_wait_prior.
void pipeline_copy(void* dst, const void* src, size_t bytes);
void pipeline_commit();
void pipeline_wait(size_t prior);

/// The current block's dynamic shared memory.
unsigned char* dynamic_shared();

/// Checks that p is aligned for V, then reads it.
template <class V, class S>
V load_aligned(const S* p) {
  if (reinterpret_cast<uintptr_t>(p) % alignof(V) != 0) fail("misaligned vector load");
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// ---- The runtime ------------------------------------------------------------------------------------
enum cudaError_t {
  cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101, cudaErrorInsufficientDriver = 35, cudaErrorNoDevice = 100,
  cudaErrorLaunchFailure = 719, cudaErrorPeerAccessAlreadyEnabled = 704
};
const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();

using cudaStream_t = ::CUstream_st*;
using cudaEvent_t = ::CUevent_st*;
inline constexpr unsigned cudaStreamNonBlocking = 1;
inline constexpr unsigned cudaEventDisableTiming = 2;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2, cudaMemoryTypeManaged = 3
};
struct cudaPointerAttributes {
  cudaMemoryType type = cudaMemoryTypeUnregistered;
  int device = 0;
  void* devicePointer = nullptr;
  void* hostPointer = nullptr;
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor;
  int multiProcessorCount;
  int l2CacheSize;
  size_t sharedMemPerMultiprocessor;
  size_t sharedMemPerBlockOptin;
};

/// How many devices the emulation reports (1 by default; 0 imitates a machine without a GPU).
void set_device_count(int n);
/// The seed of the streams' random delays and their bound in microseconds (defaults: $ILLM_EMU_SEED or 1, and
/// $ILLM_EMU_MAX_DELAY_US or 200); streams made afterwards draw from it.
void set_stream_delay(uint64_t seed, unsigned max_delay_us);

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream = nullptr);
cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer);
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags);
/// Copies between the memory of two devices (through the host where peer access is not enabled, as CUDA does).
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t stream = nullptr);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* p);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attribute, int value);
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int block_size,
                                                          size_t shared_bytes);

/// Stops with `what` when `stream` (null: the default stream) belongs to another device than the one current
/// on this thread, as a launch into it would fail on a GPU.
void check_stream(cudaStream_t stream, const char* what);
/// The device whose memory `p` is (device memory only).
int device_of(const void* p);

/// Checks a launch (block shape, the shared memory that cudaFuncSetAttribute allowed `func`) as a GPU would,
/// then queues `body` on `stream` to run as every thread of every block of the grid (one block at a time) with
/// device memory accessible.
cudaError_t launch_grid(const void* func, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                        std::function<void()> body);

/// True when [p, p + bytes) lies in one device allocation.
bool is_device(const void* p, size_t bytes);

// ---- cuBLAS -----------------------------------------------------------------------------------------
enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_NOT_INITIALIZED = 1, CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7, CUBLAS_STATUS_ARCH_MISMATCH = 8, CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13, CUBLAS_STATUS_INTERNAL_ERROR = 14, CUBLAS_STATUS_NOT_SUPPORTED = 15
};
using cublasHandle_t = ::cublasContext*;
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cudaDataType_t { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 };
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0 };

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
/// Column-major C = alpha op(A) op(B) + beta C, checked as cuBLAS checks it, computed in double.
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType_t a_type, int lda, const void* B,
                            cudaDataType_t b_type, int ldb, const void* beta, void* C, cudaDataType_t c_type, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo);

}  // namespace illm_emu

using namespace illm_emu;  // the sources name these as the real headers' globals

// ---- Device-side names the kernels use -------------------------------------------------------------
#define threadIdx (::illm_emu::current_indices().thread_idx)
#define blockIdx (::illm_emu::current_indices().block_idx)
#define blockDim (::illm_emu::current_indices().block_dim)
#define gridDim (::illm_emu::current_indices().grid_dim)

inline void __syncthreads() { illm_emu::sync_block(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  if (mask != 0xffffffffu) illm_emu::fail("__syncwarp with a partial mask");
  illm_emu::sync_warp();
}
template <class T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  if (mask != 0xffffffffu) illm_emu::fail("shuffle with a partial mask");
  const int lane = illm_emu::lane_id();
  const int source = (lane ^ lane_mask) < ((lane / width) + 1) * width ? lane ^ lane_mask : lane;
  return illm_emu::shuffle_from(value, source);
}
template <class T>
T __shfl_sync(unsigned mask, T value, int source_lane, int width = 32) {
  if (mask != 0xffffffffu) illm_emu::fail("shuffle with a partial mask");
  const int lane = illm_emu::lane_id();
  return illm_emu::shuffle_from(value, (lane / width) * width + source_lane % width);
}
inline void __pipeline_memcpy_async(void* dst, const void* src, size_t bytes, size_t zero_fill = 0) {
  if (zero_fill != 0) illm_emu::fail("cp.async zero fill is not emulated");
  illm_emu::pipeline_copy(dst, src, bytes);
}
inline void __pipeline_commit() { illm_emu::pipeline_commit(); }
inline void __pipeline_wait_prior(size_t prior) { illm_emu::pipeline_wait(prior); }

inline unsigned char* emu_dynamic_shared() { return illm_emu::dynamic_shared(); }
template <class V, class S>
V emu_load(const S* p) {
  return illm_emu::load_aligned<V>(p);
}

/// The launch of gpu/cuda/device.cuh under emulation: every thread calls `kernel(args...)`.
template <class... Params>
cudaError_t emu_launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                       Params... args) {
  illm_emu::check_stream(stream, "a kernel launch");
  return illm_emu::launch_grid(reinterpret_cast<const void*>(kernel), grid, block, shared_bytes, stream,
                               [kernel, saved = std::tuple<Params...>(args...)] { std::apply(kernel, saved); });
}
