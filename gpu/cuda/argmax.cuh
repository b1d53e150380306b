#pragma once
// Greedy sampling on the device: the index of the largest logit of each row.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu/cuda/abi.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// One thread block per row; the lowest index wins among equal maxima (as gpu::argmax).
///   logits  [n][vocab] fp32, rows ld apart (device)
///   out     [n] int32 (device)
cudaError_t argmax_rows(const float* logits, size_t ld, int n, int vocab, int32_t* out, cudaStream_t stream);

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
