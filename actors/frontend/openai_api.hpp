#pragma once
// The OpenAI-compatible request and response formats: parsing and checking a completion or chat
// completion request (every field's type and range; unknown fields refused, as OpenAI does; features
// this server lacks accepted only at their neutral values), and building the response bodies, the
// streamed chunks and the error bodies. No I/O here: the HTTP service calls it.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "actors/frontend/tool_calls.hpp"
#include "gpu/formats/bounded_json.hpp"
#include "gpu/sampler.hpp"
#include "gpu/tokenizer.hpp"

namespace illm::jinja {
class chat_template;
}

namespace illm::actors::frontend {

/// Which API a request came to.
enum class endpoint { completions, chat_completions };

/// Limits on what a request may ask.
struct api_limits {
  size_t max_body_bytes = size_t(1) << 20;
  /// Deepest nesting of arrays and objects in a body (and in JSON texts inside it, such as a tool call's
  /// arguments): deeper bodies are refused while they are parsed, before anything walks them.
  int max_json_depth = gpu::default_request_json_depth;
  int max_prompt_tokens = 4096;
  int max_tokens = 2048;       ///< largest max_tokens accepted
  int default_max_tokens = 256;  ///< when a chat request gives none (completions default to 16, as OpenAI)
  int max_stop = 4;
  int max_model_len = 0;  ///< the model's context: prompt plus max_tokens may not pass it (0: no bound)
  int max_logit_bias = 1024;     ///< tokens one logit_bias may name
  int max_stop_token_ids = 64;
  int max_logprobs = 20;         ///< alternatives per token (completions' logprobs, chat's top_logprobs)
  size_t max_schema_bytes = size_t(64) << 10;  ///< a response_format's JSON schema, as compact JSON (a tool's too)
  int max_tools = 128;           ///< functions one request may offer
  int max_n = 16;                ///< choices one request may ask (n, best_of)
  /// Sampling of a request that gives none of temperature, top_p, top_k, min_p, repetition_penalty: OpenAI's
  /// (temperature 1), or the model's generation_config.json's.
  gpu::sampling_params default_sampling{1.0f};
};

/// An error as OpenAI reports it: HTTP status and the body's fields.
struct api_error {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  ///< empty: null
  std::string code;   ///< empty: null
};

/// Makes an api_error.
inline api_error make_error(int status, std::string message, std::string type = "invalid_request_error",
                            std::string param = {}, std::string code = {}) {
  return {status, std::move(message), std::move(type), std::move(param), std::move(code)};
}

/// A checked request, ready to run.
struct completion_request {
  endpoint kind = endpoint::completions;
  std::string model;
  std::vector<int32_t> prompt_ids;  ///< BOS first for text prompts; token arrays as given
  int max_tokens = 16;
  /// temperature, top_p, top_k (as vLLM), min_p (as vLLM), the presence and frequency penalties, repetition_penalty
  /// (as vLLM), logit_bias, min_tokens (as vLLM), and the alternatives shown per output token (completions'
  /// logprobs; chat's top_logprobs; -1: none).
  gpu::sampling_params sampling{1.0f};
  std::optional<uint64_t> seed;
  /// Extension (as vLLM): the prefix-cache blocks of this request are shared only with requests of the same salt
  /// (and API key scope): what separates tenants behind one key (empty: none).
  std::string cache_salt;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  ///< stream_options.include_usage
  bool ignore_eos = false;     ///< extension (as vLLM): keep going past the model's end of text
  bool return_token_ids = false;  ///< extension (as vLLM): the choice carries token_ids and prompt_token_ids
  std::vector<int32_t> stop_token_ids;  ///< extension (as vLLM): these end the output too, with ignore_eos as well
  bool echo = false;  ///< completions: the prompt comes back before the output (with its log probabilities)
  /// response_format as the grammar its output keeps to: a spec of gpu/grammar/constraint_cache.hpp (empty: none).
  std::string constraint;
  /// How the output's tool calls are parsed (none: no tools, or tool_choice none).
  tool_syntax call_syntax = tool_syntax::none;
  std::vector<std::string> tool_names;  ///< the tools a call may name
  bool tool_call_required = false;      ///< tool_choice required or a named function: the constraint makes one call
  bool parallel_tool_calls = true;      ///< false: at most one call (those after the first are dropped)
  int n = 1;        ///< choices returned
  int best_of = 1;  ///< completions: choices generated (the n with the highest log probability are returned)
  int choice = 0;   ///< which choice this copy of the request runs (its index in responses and chunks)
  int prompt_logprobs = -1;  ///< extension (as vLLM): the prompt's log probabilities with this many alternatives
};

/// Parses and checks a request body for `kind`; `served_model` is the only model id accepted. Chat messages
/// become a prompt through `chat` (the model's template), or without one as their contents joined by newlines.
std::variant<completion_request, api_error> parse_request(endpoint kind, std::string_view body,
                                                          const gpu::tokenizer& vocab, const api_limits& limits,
                                                          const std::string& served_model,
                                                          const jinja::chat_template* chat = nullptr);

/// The JSON body of an error.
std::string error_body(const api_error& e);

/// What a finished generation reports.
struct completion_result {
  std::string text;
  std::string finish_reason;  ///< "length" or "stop"
  int prompt_tokens = 0;
  int completion_tokens = 0;
  std::vector<int32_t> token_ids;  ///< generated
  std::vector<gpu::token_logprobs> logprobs;  ///< per generated token, when the request asked for them
  /// With echo and logprobs, or prompt_logprobs: per prompt token (the first's empty).
  std::vector<gpu::token_logprobs> prompt_logprobs;
  /// With tools: the text without its tool calls, and the calls (tool_call_parser's split of `text`).
  std::string content;
  std::vector<tool_call> tool_calls;
  int cached_tokens = 0;  ///< of the prompt's tokens, those whose KV the prefix cache held
};

/// Output tokens with their log probabilities, as a response or one streamed chunk shows them.
struct logprobs_part {
  const gpu::tokenizer* vocab = nullptr;
  std::span<const int32_t> ids;
  std::span<const gpu::token_logprobs> values;  ///< one per id
  int32_t before = 0;      ///< the token before the first (a token's text depends on it)
  size_t text_offset = 0;  ///< completions: where the first token's text starts in the choice's text
  size_t unscored = 0;     ///< leading tokens shown without log probabilities (an echoed prompt's first)
};

/// An echoed prompt's text: its tokens decoded one after another (what its log probabilities' tokens join to).
std::string echoed_text(const completion_request& r, const gpu::tokenizer& vocab);

/// The JSON body of a non-streamed response.
std::string response_body(const completion_request& r, const std::string& id, int64_t created,
                          const completion_result& result, const gpu::tokenizer* vocab = nullptr);
/// The JSON body of a response of several choices (numbered in order); usage counts `completion_tokens` (every
/// choice generated, those best_of left out too).
std::string response_body(const completion_request& r, const std::string& id, int64_t created,
                          std::span<const completion_result> choices, int completion_tokens,
                          const gpu::tokenizer* vocab = nullptr);

/// One server-sent event carrying a streamed piece of text (finish_reason empty while running); with
/// return_token_ids, the ids of the tokens whose text it carries (and the prompt's in the first); with `logprobs`,
/// those tokens' log probabilities; with `calls`, tool calls completed (the first numbered `first_call`).
std::string stream_chunk(const completion_request& r, const std::string& id, int64_t created, const std::string& text,
                         const std::string& finish_reason, bool first, const std::vector<int32_t>& token_ids = {},
                         const logprobs_part* logprobs = nullptr, std::span<const tool_call> calls = {},
                         size_t first_call = 0);

/// The usage event a stream sends last when stream_options.include_usage is set.
std::string stream_usage(const completion_request& r, const std::string& id, int64_t created, int prompt_tokens,
                         int completion_tokens, int cached_tokens = 0);

/// POST /tokenize (as vLLM): {model, prompt, add_special_tokens} or the chat form {model, messages,
/// add_generation_prompt, add_special_tokens, chat_template_kwargs, tools} -> {tokens, count, max_model_len}.
std::variant<std::string, api_error> tokenize_body(std::string_view body, const gpu::tokenizer& vocab,
                                                   const jinja::chat_template* chat, const api_limits& limits,
                                                   const std::string& served_model);
/// POST /detokenize (as vLLM): {model, tokens} -> {prompt}.
std::variant<std::string, api_error> detokenize_body(std::string_view body, const gpu::tokenizer& vocab,
                                                     const api_limits& limits, const std::string& served_model);

/// The body of GET /v1/models.
std::string models_body(const std::string& model, int64_t created, int max_model_len);

/// Text decoded from generated tokens, released only in whole UTF-8 characters, and cut at the first
/// stop string (text that could still become a stop string is held back).
class text_stream {
 public:
  text_stream(const gpu::tokenizer& vocab, int32_t last_prompt_token, std::vector<std::string> stop);
  /// Adds a token; returns the text that can be released now.
  std::string push(int32_t token);
  /// Everything held back, at the end of the generation.
  std::string finish();
  /// True once a stop string has appeared (the request should end).
  bool stopped() const { return stopped_; }

 private:
  const gpu::tokenizer& vocab_;
  int32_t prev_;
  std::vector<std::string> stop_;
  std::string pending_;  // decoded, not yet released
  bool stopped_ = false;
};

}  // namespace illm::actors::frontend
