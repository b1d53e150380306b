#include "gpu/jinja/chat_template.hpp"

namespace illm::jinja {

gpu::result<chat_template> chat_template::create(const std::string& source, std::string bos_token,
                                                 std::string eos_token, const std::string& origin) {
  try {
    chat_template t(template_program::parse(source));
    t.bos_ = std::move(bos_token);
    t.eos_ = std::move(eos_token);
    t.source_ = source;
    return t;
  } catch (const template_error& e) {
    return gpu::status{gpu::status_code::corrupt_model, origin + ": chat template: " + e.what()};
  }
}

gpu::result<std::string> chat_template::render(const json& messages, const json& tools, bool add_generation_prompt,
                                               const json& kwargs) const {
  json variables = json::object();
  if (kwargs.is_object())
    for (const auto& [k, v] : kwargs.items()) variables[k] = v;
  variables["messages"] = messages;
  if (!tools.is_null()) variables["tools"] = tools;
  variables["add_generation_prompt"] = add_generation_prompt;
  variables["bos_token"] = bos_;
  variables["eos_token"] = eos_;
  try {
    return program_.render(variables);
  } catch (const template_error& e) {
    return gpu::status{gpu::status_code::invalid_argument, std::string("the chat template refused the messages: ") + e.what()};
  }
}

}  // namespace illm::jinja
