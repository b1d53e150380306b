#include "gpu/cpu/blas_core.hpp"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

#if ILLM_HAVE_BLAS
#include <cblas.h>
#endif

namespace illm::gpu::cpu {

namespace {

/// OpenBLAS's x86 cores that use neither AVX2 nor AVX-512 (openblas_get_corename's names).
bool pre_avx2_core(const char* name) {
  static const char* const old_cores[] = {"unknown", "Katmai",  "Coppermine", "Northwood", "Prescott", "Banias",
                                          "Atom",    "Core2",   "Penryn",     "Dunnington", "Nehalem", "Sandybridge",
                                          "Opteron", "Opteron(SSE3)", "Barcelona", "Nano",  "Bobcat",  "Bulldozer",
                                          "Piledriver", "Steamroller", "Excavator"};
  for (const char* old : old_cores)
    if (strcasecmp(name, old) == 0) return true;
  return false;
}

}  // namespace

const char* better_blas_core() {
#if ILLM_HAVE_BLAS && defined(__x86_64__)
  if (std::getenv("OPENBLAS_CORETYPE")) return nullptr;
  const char* chosen = openblas_get_corename();
  if (!chosen) return nullptr;
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx512 && (pre_avx2_core(chosen) || strcasecmp(chosen, "Haswell") == 0)) return "SkylakeX";
  if (avx2 && pre_avx2_core(chosen)) return "Haswell";
#endif
  return nullptr;
}

void restart_for_blas_core(char** argv) {
  const char* core = better_blas_core();
  if (!core || setenv("OPENBLAS_CORETYPE", core, 1) != 0) return;
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");  // the restart failed: go on with the kernels loaded
}

}  // namespace illm::gpu::cpu
