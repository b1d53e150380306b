// The llama2.c checkpoint loader as a model file can reach it: any bytes are a file it is asked to load.
#include <cstdint>

#include "gpu/checkpoint.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)illm::gpu::load_llama2c(illm::fuzz::as_file(data, size));
  return 0;
}
