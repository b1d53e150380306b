#pragma once
// The sampling fields of a completion or chat completion request: top_k, min_p, the presence, frequency and
// repetition penalties, logit_bias, min_tokens, stop_token_ids and the log probabilities asked for (completions'
// logprobs N; chat's logprobs and top_logprobs), each checked for type and range.

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "actors/frontend/openai_api.hpp"

namespace illm::actors::frontend {

/// A 400 naming `param`.
api_error bad_field(std::string message, std::string param = {}, std::string code = {});

/// Reads an optional number in [lo, hi] (above lo when `lo_open`) into out.
std::optional<api_error> read_number(const nlohmann::json& body, const char* name, double lo, double hi, bool lo_open,
                                     float& out);

/// Reads response_format (text, json_object, or json_schema with its schema) into r.constraint, a spec of
/// gpu/grammar/constraint_cache.hpp; whether the schema can be followed is for the front end's constraint cache.
std::optional<api_error> read_response_format(const nlohmann::ordered_json& body, const api_limits& limits,
                                              completion_request& r);

/// Reads the sampling fields above from `body` into `r` (its max_tokens read already).
std::optional<api_error> read_sampling_fields(endpoint kind, const nlohmann::json& body, int vocab_size,
                                              const api_limits& limits, completion_request& r);

}  // namespace illm::actors::frontend
