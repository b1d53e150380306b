#include "actors/frontend/sampling_fields.hpp"

#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "gpu/grammar/constraint_cache.hpp"

namespace illm::actors::frontend {

using json = nlohmann::json;

api_error bad_field(std::string message, std::string param, std::string code) {
  return make_error(400, std::move(message), "invalid_request_error", std::move(param), std::move(code));
}

std::optional<api_error> read_number(const json& body, const char* name, double lo, double hi, bool lo_open,
                                     float& out) {
  if (!body.contains(name) || body.at(name).is_null()) return std::nullopt;
  const json& v = body.at(name);
  if (!v.is_number()) return bad_field(fmt::format("'{}' must be a number", name), name);
  const double x = v.get<double>();
  if (x > hi || x < lo || (lo_open && x == lo))
    return bad_field(fmt::format("'{}' must be {} {} and at most {}", name, lo_open ? "above" : "at least", lo, hi),
                     name);
  out = float(x);
  return std::nullopt;
}

namespace {

/// Reads an optional integer in [lo, hi] into out.
std::optional<api_error> read_integer(const json& body, const char* name, int64_t lo, int64_t hi, int& out) {
  if (!body.contains(name) || body.at(name).is_null()) return std::nullopt;
  const json& v = body.at(name);
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi)
    return bad_field(fmt::format("'{}' must be an integer from {} to {}", name, lo, hi), name);
  out = int(v.get<int64_t>());
  return std::nullopt;
}

/// A token id of the vocabulary, written as OpenAI's logit_bias keys are (a decimal string).
std::optional<int32_t> token_key(const std::string& key, int vocab_size) {
  if (key.empty() || key.size() > 10 || key.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const long id = std::strtol(key.c_str(), nullptr, 10);
  if (id < 0 || id >= vocab_size) return std::nullopt;
  return int32_t(id);
}

std::optional<api_error> read_logit_bias(const json& body, int vocab_size, const api_limits& limits,
                                         completion_request& r) {
  if (!body.contains("logit_bias") || body.at("logit_bias").is_null()) return std::nullopt;
  const json& v = body.at("logit_bias");
  if (!v.is_object()) return bad_field("'logit_bias' must be an object of token ids and numbers", "logit_bias");
  if (int(v.size()) > limits.max_logit_bias)
    return bad_field(fmt::format("'logit_bias' may name at most {} tokens", limits.max_logit_bias), "logit_bias");
  for (const auto& [key, value] : v.items()) {
    const auto id = token_key(key, vocab_size);
    if (!id)
      return bad_field(fmt::format("logit_bias key '{}' is not a token id of the vocabulary (0..{})", key,
                                   vocab_size - 1),
                       "logit_bias");
    if (!value.is_number() || value.get<double>() < -100.0 || value.get<double>() > 100.0)
      return bad_field(fmt::format("logit_bias of token {} must be a number from -100 to 100", key), "logit_bias");
    r.sampling.logit_bias.emplace_back(*id, float(value.get<double>()));
  }
  return std::nullopt;
}

std::optional<api_error> read_stop_token_ids(const json& body, int vocab_size, const api_limits& limits,
                                             completion_request& r) {
  if (!body.contains("stop_token_ids") || body.at("stop_token_ids").is_null()) return std::nullopt;
  const json& v = body.at("stop_token_ids");
  if (!v.is_array() || int(v.size()) > limits.max_stop_token_ids)
    return bad_field(fmt::format("'stop_token_ids' must be a list of at most {} token ids", limits.max_stop_token_ids),
                     "stop_token_ids");
  for (const json& id : v) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size)
      return bad_field(fmt::format("stop token id {} is outside the vocabulary (0..{})", id.dump(), vocab_size - 1),
                       "stop_token_ids");
    r.stop_token_ids.push_back(int32_t(id.get<int64_t>()));
  }
  return std::nullopt;
}

/// Completions: logprobs N (the chosen token and N alternatives). Chat: logprobs true, with top_logprobs N.
std::optional<api_error> read_logprobs(endpoint kind, const json& body, const api_limits& limits,
                                       completion_request& r) {
  const json none;
  const json& logprobs = body.contains("logprobs") ? body.at("logprobs") : none;
  if (kind == endpoint::completions) {
    if (logprobs.is_boolean() && !logprobs.get<bool>()) return std::nullopt;
    return read_integer(body, "logprobs", 0, limits.max_logprobs, r.sampling.logprobs);
  }
  if (!logprobs.is_null() && !logprobs.is_boolean()) return bad_field("'logprobs' must be a boolean", "logprobs");
  const bool on = logprobs.is_boolean() && logprobs.get<bool>();
  int top = 0;
  if (auto e = read_integer(body, "top_logprobs", 0, limits.max_logprobs, top)) return e;
  if (!on && body.contains("top_logprobs") && !body.at("top_logprobs").is_null())
    return bad_field("top_logprobs needs logprobs set to true", "top_logprobs");
  r.sampling.logprobs = on ? top : -1;
  return std::nullopt;
}

}  // namespace

std::optional<api_error> read_response_format(const nlohmann::ordered_json& body, const api_limits& limits,
                                              completion_request& r) {
  using json = nlohmann::ordered_json;  // the schema's properties keep the client's order
  if (!body.contains("response_format") || body.at("response_format").is_null()) return std::nullopt;
  const json& f = body.at("response_format");
  const std::string type = f.is_object() && f.contains("type") && f.at("type").is_string() ? f.at("type").get<std::string>() : "";
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    r.constraint = gpu::grammar::json_object_spec;
    return std::nullopt;
  }
  if (type != "json_schema")
    return bad_field("response_format must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or {\"type\": "
                     "\"json_schema\", \"json_schema\": {\"name\": ..., \"schema\": {...}}}",
                     "response_format");
  const json none;
  const json& spec = f.contains("json_schema") ? f.at("json_schema") : none;
  if (!spec.is_object() || !spec.contains("schema") || !(spec.at("schema").is_object() || spec.at("schema").is_boolean()))
    return bad_field("response_format json_schema needs json_schema.schema, a JSON schema", "response_format");
  const std::string text = spec.at("schema").dump();
  if (text.size() > limits.max_schema_bytes)
    return bad_field(fmt::format("the json schema is larger than {} bytes", limits.max_schema_bytes), "response_format");
  r.constraint = gpu::grammar::json_schema_spec_prefix + text;
  return std::nullopt;
}

std::optional<api_error> read_sampling_fields(endpoint kind, const json& body, int vocab_size,
                                              const api_limits& limits, completion_request& r) {
  if (auto e = read_integer(body, "top_k", -1, vocab_size, r.sampling.top_k)) return e;
  if (r.sampling.top_k < 0) r.sampling.top_k = 0;  // -1: off, as vLLM
  if (auto e = read_number(body, "min_p", 0.0, 1.0, false, r.sampling.min_p)) return e;
  if (auto e = read_number(body, "presence_penalty", -2.0, 2.0, false, r.sampling.presence_penalty)) return e;
  if (auto e = read_number(body, "frequency_penalty", -2.0, 2.0, false, r.sampling.frequency_penalty)) return e;
  if (auto e = read_number(body, "repetition_penalty", 0.0, 10.0, true, r.sampling.repetition_penalty)) return e;
  if (auto e = read_integer(body, "min_tokens", 0, r.max_tokens, r.sampling.min_tokens)) return e;
  if (auto e = read_logit_bias(body, vocab_size, limits, r)) return e;
  if (auto e = read_stop_token_ids(body, vocab_size, limits, r)) return e;
  return read_logprobs(kind, body, limits, r);
}

}  // namespace illm::actors::frontend
