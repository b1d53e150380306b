// A GGUF file as --model can hand it over: any bytes are opened as one; what opens has its model read, its
// vocabulary built and its weights converted.
#include <cstdint>

#include "gpu/formats/gguf_model.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = illm::gpu::gguf_file::open(illm::fuzz::as_file(data, size));
  if (!file.is_ok()) return 0;
  auto model = illm::gpu::read_gguf_model(file.value());
  if (!model.is_ok()) return 0;
  // A fuzzed shape may ask for more weights than a test machine has: converted only when small.
  if (model->config.parameter_count(model->tied_embeddings) < (uint64_t(1) << 22))
    (void)illm::gpu::load_gguf_weights(file.value(), model.value());
  if (auto vocab = illm::gpu::load_gguf_tokenizer(file.value(), model.value()); vocab.is_ok())
    (void)vocab.value()->encode("Hello, world 123", true);
  return 0;
}
