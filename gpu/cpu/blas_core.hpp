#pragma once
// OpenBLAS picks its kernels once, when it loads, by the processor's model. A model its table lacks (a virtual
// machine's "Intel Xeon Processor") gets the SSE3 kernels (core "Prescott"): on such an AVX-512 machine a 512-token
// prefill of stories15M ran at a third of the speed the SkylakeX kernels give. OPENBLAS_CORETYPE chooses the core,
// but only before the library loads: so a program whose OpenBLAS chose a core older than the processor's SIMD is
// started again with it set.

namespace illm::gpu::cpu {

/// The core OpenBLAS should run on this processor when it chose an older one: "SkylakeX" (AVX-512), "Haswell"
/// (AVX2 and FMA); null when its choice is right (or set by the user), or when this build has no OpenBLAS.
const char* better_blas_core();

/// Where better_blas_core names a core: sets OPENBLAS_CORETYPE to it and executes this program again with `argv`
/// (returns only if that fails). Call first in main, before any thread starts.
void restart_for_blas_core(char** argv);

}  // namespace illm::gpu::cpu
