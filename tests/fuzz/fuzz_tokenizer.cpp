// The tokenizer as a model's tokenizer.bin and a client's text can reach it: the first two bytes pick the
// vocabulary's size, the rest is the file; a file that loads encodes and decodes texts (the input itself among
// them), every id inside the vocabulary.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "gpu/tokenizers/llama2c_tokenizer.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace illm;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int vocab_size = 1 + (data[0] | data[1] << 8) % 600;
  auto vocab = gpu::llama2c_tokenizer::load(fuzz::as_file(data + 2, size - 2), vocab_size);
  if (!vocab.is_ok()) return 0;
  for (std::string_view text : {std::string_view("Once upon a time"),
                                std::string_view(reinterpret_cast<const char*>(data), size)}) {
    const auto ids = vocab->encode(text, true);
    for (int32_t id : ids)
      if (id < 0 || id >= vocab_size) std::abort();
    (void)vocab->decode(ids, 0);
  }
  return 0;
}
