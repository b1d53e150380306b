#pragma once
// A small Jinja engine for chat templates: what the templates of real models use (Llama 3.x, Qwen2.5, Qwen3,
// Mistral and others), rendered as transformers' apply_chat_template renders them with Jinja2: trim_blocks and
// lstrip_blocks, whitespace control, if/elif/else, for (with loop.*, a filter, else, break and continue), set
// (names, namespace attributes, blocks), macros, filters, tests, Python's string, list and dict methods, slices,
// and the globals raise_exception, strftime_now, range, namespace and dict. A construct it does not know is a
// template_error naming the line, when the template is parsed.

#include <memory>
#include <string>

#include "gpu/jinja/value.hpp"

namespace illm::jinja {

struct node;

/// A parsed template.
class template_program {
 public:
  /// Parses `source`; template_error naming the line of the first construct it cannot read.
  static template_program parse(const std::string& source);
  ~template_program();
  template_program(template_program&&) noexcept;
  template_program& operator=(template_program&&) noexcept;

  /// Renders with `variables` (an object: messages, tools, add_generation_prompt, bos_token, ...) and the
  /// globals; template_error on a type error or raise_exception.
  std::string render(const json& variables) const;

 private:
  template_program() = default;
  std::unique_ptr<node> root_;
};

}  // namespace illm::jinja
