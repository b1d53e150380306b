// The OpenAI request parser as a client can reach it: the first byte picks completions or chat completions, the
// rest is the body. A request that parses is answered (a whole response and a stream's chunks are formatted). The
// body is also a model's output for the tool-call parser of both syntaxes, given in two pieces.
#include <cstdint>
#include <string_view>
#include <variant>

#include "actors/frontend/openai_api.hpp"
#include "gpu/tokenizers/llama2c_tokenizer.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace illm;
namespace api = illm::actors::frontend;

namespace {

const gpu::tokenizer& vocab() {
  static const gpu::llama2c_tokenizer t = [] {
    const auto image = fuzz::small_vocab_image();
    return gpu::llama2c_tokenizer::load(fuzz::as_file(image.data(), image.size()), fuzz::small_vocab_size).value();
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const api::endpoint kind = data[0] & 1 ? api::endpoint::chat_completions : api::endpoint::completions;
  const std::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  api::api_limits limits;
  limits.max_prompt_tokens = 512;
  auto parsed = api::parse_request(kind, body, vocab(), limits, "stories15M");
  if (auto* r = std::get_if<api::completion_request>(&parsed)) {
    api::completion_result result;
    result.text = "Once upon a time";
    result.prompt_tokens = int(r->prompt_ids.size());
    result.completion_tokens = 4;
    result.finish_reason = "length";
    (void)api::response_body(*r, "cmpl-1", 1, result);
    (void)api::stream_chunk(*r, "cmpl-1", 1, "text", "", true);
  } else {
    (void)api::error_body(std::get<api::api_error>(parsed));
  }
  for (api::tool_syntax syntax : {api::tool_syntax::hermes, api::tool_syntax::json}) {
    api::tool_call_parser calls(syntax, {"get_weather", "f"}, "call_");
    (void)calls.push(body.substr(0, body.size() / 2));
    (void)calls.push(body.substr(body.size() / 2));
    (void)calls.finish();
  }
  return 0;
}
