// Part of each test_kernels_<level> executable, compiled for plain x86-64: before any static initializer of the
// rest (compiled for the level, whose code may already use its instructions, as doctest's registration of the test
// cases does under AVX-512) it exits 77, CTest's skip, where the processor lacks the level.
#include <cstdio>

#include <unistd.h>

namespace {

__attribute__((constructor(101))) void skip_without_the_level() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports(ILLM_TEST_CPU_FEATURE)) return;
  std::printf("this processor lacks %s: the %s kernels are not run here\n", ILLM_TEST_CPU_FEATURE, ILLM_TEST_ISA);
  std::fflush(stdout);
  _exit(77);
}

}  // namespace
