#include "actors/frontend/tool_calls.hpp"

#include <algorithm>
#include <optional>

#include <nlohmann/json.hpp>

#include "gpu/formats/bounded_json.hpp"

namespace illm::actors::frontend {

namespace {

using ordered_json = nlohmann::ordered_json;  // arguments keep the model's order

constexpr std::string_view open_tag = "<tool_call>";
constexpr std::string_view close_tag = "</tool_call>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/// The length of the longest end of `text` that begins `tag` (it may become the tag with more text).
size_t partial_tag(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

tool_syntax tool_syntax_of(const std::string& template_source) {
  return template_source.find(open_tag) != std::string::npos ? tool_syntax::hermes : tool_syntax::json;
}

tool_call_parser::tool_call_parser(tool_syntax syntax, std::vector<std::string> names, std::string id_prefix,
                                   size_t max_calls)
    : syntax_(syntax), names_(std::move(names)), id_prefix_(std::move(id_prefix)), max_calls_(max_calls) {}

void tool_call_parser::release_content(piece& out, std::string_view text) {
  const size_t end = text.find_last_not_of(" \n\r\t");
  if (end == std::string_view::npos) {  // white space only: held until content follows
    held_space_ += text;
    return;
  }
  out.content += held_space_;
  held_space_.clear();
  out.content += text.substr(0, end + 1);
  held_space_ = std::string(text.substr(end + 1));
}

/// The call `json_text` writes (an object with a known name and an object of arguments; its id not given yet).
std::optional<tool_call> tool_call_parser::call_of(std::string_view json_text) const {
  const ordered_json call = gpu::parse_bounded_or_discarded<ordered_json>(json_text, gpu::json_depth_outside_requests);
  if (!call.is_object() || !call.contains("name") || !call.at("name").is_string()) return std::nullopt;
  const std::string name = call.at("name").get<std::string>();
  if (std::find(names_.begin(), names_.end(), name) == names_.end()) return std::nullopt;
  const ordered_json none;
  ordered_json arguments = call.contains("arguments")    ? call.at("arguments")
                           : call.contains("parameters") ? call.at("parameters")
                                                         : none;
  if (arguments.is_string()) arguments = gpu::parse_bounded_or_discarded<ordered_json>(arguments.get<std::string>(),
                                                                 gpu::json_depth_outside_requests);
  if (!arguments.is_object()) return std::nullopt;
  return tool_call{{}, name, arguments.dump()};
}

void tool_call_parser::add_call(piece& out, tool_call call) {
  held_space_.clear();  // white space beside a call is not content
  if (found_ >= max_calls_) return;  // parallel_tool_calls false: the first call only
  call.id = id_prefix_ + std::to_string(found_++);
  out.calls.push_back(std::move(call));
}

void tool_call_parser::push_hermes(piece& out) {
  while (true) {
    if (inside_call_) {
      const size_t end = held_.find(close_tag);
      if (end == std::string::npos) return;
      const std::string body = held_.substr(0, end);
      if (auto call = call_of(body)) add_call(out, std::move(*call));
      else release_content(out, std::string(open_tag) + body + std::string(close_tag));
      held_.erase(0, end + close_tag.size());
      inside_call_ = false;
      continue;
    }
    const size_t start = held_.find(open_tag);
    if (start == std::string::npos) {
      const size_t keep = partial_tag(held_, open_tag);
      release_content(out, std::string_view(held_).substr(0, held_.size() - keep));
      held_.erase(0, held_.size() - keep);
      return;
    }
    release_content(out, std::string_view(held_).substr(0, start));
    held_.erase(0, start + open_tag.size());
    inside_call_ = true;
  }
}

tool_call_parser::piece tool_call_parser::push(std::string_view text) {
  piece out;
  held_ += text;
  if (syntax_ == tool_syntax::hermes) {
    push_hermes(out);
  } else if (syntax_ == tool_syntax::json && !json_output_) {
    if (!decided_) {
      const size_t first = held_.find_first_not_of(" \n\r\t");
      if (first == std::string::npos) return out;  // only white space so far
      decided_ = true;
      json_output_ = held_[first] == '{' || held_[first] == '[';
      if (json_output_) return out;  // held whole until the end
    }
    release_content(out, held_);
    held_.clear();
  } else if (syntax_ == tool_syntax::none) {
    out.content = std::exchange(held_, {});
  }
  return out;
}

tool_call_parser::piece tool_call_parser::finish() {
  piece out;
  if (syntax_ == tool_syntax::hermes) {
    push_hermes(out);
    // A call cut before its closing tag (the output reached max_tokens) is not a call.
    release_content(out, inside_call_ ? std::string(open_tag) + held_ : held_);
  } else if (json_output_) {
    const std::string_view body = trimmed(held_);
    const ordered_json whole = gpu::parse_bounded_or_discarded<ordered_json>(body, gpu::json_depth_outside_requests);
    std::vector<std::string> parts;  // one object, a list of them, or objects joined by ';'
    if (whole.is_array()) {
      for (const ordered_json& item : whole) parts.push_back(item.dump());
    } else if (whole.is_object()) {
      parts.push_back(std::string(body));
    } else {
      for (size_t at = 0; at <= body.size();) {
        const size_t end = std::min(body.find(';', at), body.size());
        parts.emplace_back(trimmed(body.substr(at, end - at)));
        at = end + 1;
      }
    }
    std::vector<tool_call> calls;  // every part a call, or the output is content
    for (const std::string& p : parts)
      if (auto call = call_of(p)) calls.push_back(std::move(*call));
    if (!calls.empty() && calls.size() == parts.size()) {
      for (tool_call& call : calls) add_call(out, std::move(call));
    } else {
      release_content(out, held_);
    }
  } else {
    release_content(out, held_);
  }
  held_.clear();
  if (found_ == 0) out.content += std::exchange(held_space_, {});
  return out;
}

}  // namespace illm::actors::frontend
