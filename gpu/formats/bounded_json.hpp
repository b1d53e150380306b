#pragma once
// JSON read from outside the process (a client's body, a peer's message, a model's files) with its nesting
// bounded: text whose arrays and objects nest deeper than a limit is refused before the parser builds anything,
// so nothing that later walks the value recursively (dump, copy, compare, a schema compiler) can run out of stack.

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace illm::gpu {

/// Nesting a request body may have (a setting of the service: api_limits::max_json_depth); a JSON schema's 32
/// nested schemas of the compiler fit in it.
inline constexpr int default_request_json_depth = 128;
/// Nesting any other JSON read from outside may have: a model's files (config.json, tokenizer.json, a safetensors
/// header), a peer's JSON texts, a model's output read as JSON, a server's answers to the benchmark client.
inline constexpr int json_depth_outside_requests = 128;

/// How deep the arrays and objects of JSON `text` nest, counted to at most `limit` + 1 (the scan stops there).
/// Brackets inside strings do not count; text that is not JSON gives the depth of its brackets, which the parser
/// then refuses on its own.
int json_nesting_depth(std::string_view text, int limit);

/// A bounded parse's outcome: the value, or why there is none.
template <class Json>
struct bounded_json {
  std::optional<Json> value;
  std::string error;      ///< empty when there is a value
  bool too_deep = false;  ///< refused for its nesting (error says the limit)
};

/// Parses `text` as JSON whose arrays and objects nest at most `max_depth` deep.
template <class Json = nlohmann::json>
bounded_json<Json> parse_bounded_json(std::string_view text, int max_depth) {
  bounded_json<Json> out;
  if (json_nesting_depth(text, max_depth) > max_depth) {
    out.too_deep = true;
    out.error = "arrays and objects nest deeper than " + std::to_string(max_depth) + " levels";
    return out;
  }
  try {
    out.value = Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    out.error = e.what();
  }
  return out;
}

/// Parses `text` as JSON nested at most `max_depth` deep; a discarded value (is_discarded()) when it is not.
template <class Json = nlohmann::json>
Json parse_bounded_or_discarded(std::string_view text, int max_depth) {
  if (json_nesting_depth(text, max_depth) > max_depth) return Json(nlohmann::json::value_t::discarded);
  return Json::parse(text, nullptr, false);
}

}  // namespace illm::gpu
