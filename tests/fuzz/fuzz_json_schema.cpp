// The structured outputs' schema compiler and grammar as a client reaches them: the input's first line is a JSON
// schema (read as the front end reads a body, bounded in depth), the rest an output to match against it. A schema
// that compiles is walked: its start state, the output's bytes read one at a time (each state within the bounds of
// the matcher: stacks, depth), the bytes that may come next, the closing distance, and the tokens a small
// vocabulary allows (a constraint within its masks budget).
#include <cstdint>
#include <memory>
#include <string_view>

#include "gpu/formats/bounded_json.hpp"
#include "gpu/grammar/json_schema.hpp"
#include "gpu/grammar/token_mask.hpp"
#include "gpu/tokenizers/llama2c_tokenizer.hpp"
#include "tests/fuzz/fuzz_support.hpp"

using namespace illm;
namespace grammar = illm::gpu::grammar;

namespace {

std::shared_ptr<const grammar::token_trie> trie() {
  static const auto t = [] {
    const auto image = fuzz::small_vocab_image();
    const auto vocab = gpu::llama2c_tokenizer::load(fuzz::as_file(image.data(), image.size()), fuzz::small_vocab_size);
    return std::make_shared<const grammar::token_trie>(vocab.value());
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t line = input.find('\n');
  const std::string_view schema_text = input.substr(0, line), output = line == input.npos ? "" : input.substr(line + 1);
  const auto schema = gpu::parse_bounded_or_discarded<nlohmann::ordered_json>(schema_text, gpu::default_request_json_depth);
  if (schema.is_discarded()) return 0;
  grammar::schema_limits limits;
  limits.probed_states = 64;  // the compile's walk, smaller than the service's: the fuzzer runs many
  auto compiled = grammar::json_schema_grammar(schema, limits);
  if (!compiled.is_ok()) return 0;
  const grammar::constraint c(compiled.value(), trie(), size_t(1) << 20);
  grammar::match_state state = c.start();
  (void)c.allowed(state);
  for (size_t i = 0; i < output.size() && i < 256 && !state.dead(); ++i) {
    state = grammar::advance(c.rules(), state, uint8_t(output[i]));
    if (state.stacks.size() > grammar::max_state_stacks) __builtin_trap();  // the bound a state keeps
    for (const auto& stack : state.stacks)
      if (stack.size() > grammar::max_stack_depth) __builtin_trap();
    (void)grammar::next_bytes(c.rules(), state);
  }
  (void)c.closing_distance(state);
  if (!state.dead()) (void)c.allowed(state);
  return 0;
}
