#pragma once
// A streaming read of device memory, the yardstick of the attention bandwidth figures: what the memory
// delivers to a kernel that only reads, measured in the same run as the attention kernels.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu/cuda/abi.hpp"

namespace illm::gpu::cuda {
inline namespace ILLM_CUDA_ABI {

/// Reads bytes [0, bytes) of `data` once (16-byte loads, grid-stride); writes to `sink` (device, 16
/// bytes) only when the data xor to a value no seeded buffer gives, which keeps the loads alive.
///   data  16-byte aligned, bytes a multiple of 16 (device)
cudaError_t read_bandwidth(const void* data, size_t bytes, int sm_count, uint4* sink, cudaStream_t stream);

}  // namespace ILLM_CUDA_ABI
}  // namespace illm::gpu::cuda
