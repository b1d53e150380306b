// The chat template engine as a model's tokenizer_config.json can reach it: any bytes are parsed as a template and
// rendered on a conversation with tools. A template may be refused (template_error); nothing else may happen.
#include <cstdint>
#include <string>

#include "gpu/jinja/template.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using illm::jinja::json;
  static const json variables = json::parse(R"({"messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "",
       "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"x": 1}}}]},
      {"role": "tool", "content": "42"}], "tools": [{"type": "function", "function": {"name": "f"}}],
      "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  try {
    const auto program = illm::jinja::template_program::parse(std::string(reinterpret_cast<const char*>(data), size));
    (void)program.render(variables);
  } catch (const illm::jinja::template_error&) {
  }
  return 0;
}
