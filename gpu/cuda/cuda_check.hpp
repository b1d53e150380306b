#pragma once
// CUDA runtime and cuBLAS results converted to the engine's status, at the call site:
// ILLM_RETURN_IF_ERROR(cuda::check(cudaMemcpyAsync(...), "upload")).

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "gpu/cuda/abi.hpp"
#include "gpu/status.hpp"
#include "gpu/text.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// ok, or backend_error (out_of_memory for allocation failures) naming `what` and CUDA's error.
inline status check(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return status::ok();
  const status_code code = error == cudaErrorMemoryAllocation ? status_code::out_of_memory : status_code::backend_error;
  return {code, text::format("{}: {} ({})", what, cudaGetErrorName(error), cudaGetErrorString(error))};
}

/// The name of a cuBLAS status.
inline const char* cublas_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
  }
}

/// ok, or backend_error naming `what` and cuBLAS's status.
inline status check(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return status::ok();
  const status_code code = s == CUBLAS_STATUS_ALLOC_FAILED ? status_code::out_of_memory : status_code::backend_error;
  return {code, text::format("{}: {} ({})", what, cublas_name(s), int(s))};
}

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
