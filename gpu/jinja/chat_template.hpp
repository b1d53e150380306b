#pragma once
// A model's chat template, as transformers' apply_chat_template applies it: the messages (and tools) rendered with
// add_generation_prompt, the model's BOS and EOS token texts, and any chat_template_kwargs the request adds. The
// text it gives is tokenized without adding special tokens again: the template writes BOS where the model wants
// one.

#include <string>

#include "gpu/jinja/template.hpp"
#include "gpu/status.hpp"

namespace illm::jinja {

/// A parsed chat template and the special-token texts it may write.
class chat_template {
 public:
  /// Parses `source` (from `origin`, a file named in errors); corrupt_model naming it when it cannot be read.
  static gpu::result<chat_template> create(const std::string& source, std::string bos_token, std::string eos_token,
                                           const std::string& origin);

  /// The prompt text of `messages` (OpenAI's list) with `tools` (null: none) and `kwargs` (an object or null);
  /// invalid_argument with the template's message when it refuses them (raise_exception) or fails on them.
  gpu::result<std::string> render(const json& messages, const json& tools, bool add_generation_prompt,
                                  const json& kwargs) const;

  /// The template's text (what the front end reads a model's tool-call format from).
  const std::string& source() const { return source_; }

 private:
  explicit chat_template(template_program p) : program_(std::move(p)) {}
  template_program program_;
  std::string bos_, eos_, source_;
};

}  // namespace illm::jinja
