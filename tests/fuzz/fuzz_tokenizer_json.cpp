// A Hugging Face tokenizer.json as a model folder can hand it over: any bytes are read as one, and a text encoded
// and decoded with what loads.
#include <cstdint>
#include <string_view>

#include "gpu/tokenizers/hf_tokenizer.hpp"
#include "tests/fuzz/fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto loaded = illm::gpu::hf_tokenizer::load(illm::fuzz::as_file(data, size));
  if (!loaded.is_ok()) return 0;
  const auto ids = loaded.value()->encode("Hello, world! 123 \xE2\x96\x81 <s> caf\xC3\xA9\n", true);
  (void)loaded.value()->decode_text(ids, false);
  return 0;
}
