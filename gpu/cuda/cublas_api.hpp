#pragma once
// cuBLAS, opened with dlopen when the first cuda backend opens instead of being linked: libcublasLt
// carries about 110 KiB of static TLS, which, linked into a program, sits at the top of every thread's
// stack, and threads started with small stacks (civetweb's HTTP workers in `illm serve`) then fail to
// start. Opened at run time its TLS is allocated per thread on first use. The CUDA runtime (4 KiB of TLS)
// stays linked. Under the CPU emulation the table points at the emulated functions.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "gpu/cuda/abi.hpp"
#include "gpu/status.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// The cuBLAS functions the backend calls.
struct cublas_api {
  cublasStatus_t (*create)(cublasHandle_t* handle) = nullptr;
  cublasStatus_t (*destroy)(cublasHandle_t handle) = nullptr;
  cublasStatus_t (*set_stream)(cublasHandle_t handle, cudaStream_t stream) = nullptr;
  cublasStatus_t (*gemm_ex)(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* a, cudaDataType_t a_type, int lda, const void* b,
                            cudaDataType_t b_type, int ldb, const void* beta, void* c, cudaDataType_t c_type,
                            int ldc, cublasComputeType_t compute, cublasGemmAlgo_t algo) = nullptr;
};

/// The functions (opened once per process), or unsupported naming the library that could not be opened.
result<const cublas_api*> load_cublas();

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
