#pragma once
// The inline namespace of gpu/cuda: `device` when the sources are compiled for a GPU, `emulated` when a
// test compiles the same sources against the CPU emulation of the CUDA runtime (tests/gpu/cuda/emu).
// Code names everything illm::gpu::cuda::...; the two builds never clash when linked together.

#if ILLM_CUDA_EMULATION
#define ILLM_CUDA_ABI emulated
#else
#define ILLM_CUDA_ABI device
#endif
