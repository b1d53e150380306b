// The safetensors reader as a checkpoint can reach it: any bytes are a .safetensors file it is asked to open.
#include <cstdint>

#include "gpu/formats/safetensors.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)illm::gpu::safetensors_checkpoint::open(illm::fuzz::as_file(data, size));
  return 0;
}
