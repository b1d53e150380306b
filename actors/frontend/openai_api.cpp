#include "actors/frontend/openai_api.hpp"

#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/frontend/logprobs_json.hpp"
#include "actors/frontend/sampling_fields.hpp"
#include "actors/frontend/tool_fields.hpp"
#include "gpu/jinja/chat_template.hpp"

namespace illm::actors::frontend {

namespace {

using json = nlohmann::json;

api_error bad(std::string message, std::string param = {}, std::string code = {}) {
  return bad_field(std::move(message), std::move(param), std::move(code));
}

const std::set<std::string>& allowed_fields(endpoint kind) {
  static const std::set<std::string> completions = {
      "model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "logprobs", "echo",
      "stop", "presence_penalty", "frequency_penalty", "best_of", "logit_bias", "user", "suffix", "seed", "ignore_eos",
      "return_token_ids", "top_k", "min_p", "repetition_penalty", "min_tokens", "stop_token_ids", "prompt_logprobs",
      "cache_salt"};
  static const std::set<std::string> chat = {
      "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stream",
      "stream_options", "stop", "presence_penalty", "frequency_penalty", "logit_bias", "logprobs", "top_logprobs",
      "user", "seed", "response_format", "tools", "tool_choice", "parallel_tool_calls", "store", "metadata",
      "ignore_eos", "chat_template_kwargs", "add_generation_prompt", "return_token_ids", "top_k", "min_p",
      "repetition_penalty", "min_tokens", "stop_token_ids", "prompt_logprobs", "cache_salt"};
  return kind == endpoint::completions ? completions : chat;
}

/// A field that this server lacks is accepted only at the value that means "off".
std::optional<api_error> check_neutral(const json& body) {
  auto field = [&](const char* name) -> const json* { return body.contains(name) ? &body.at(name) : nullptr; };
  if (const json* v = field("suffix"); v && !v->is_null()) return bad("suffix is not supported", "suffix");
  for (const char* name : {"user"})
    if (const json* v = field(name); v && !v->is_null() && !v->is_string())
      return bad(fmt::format("'{}' must be a string", name), name);
  for (const char* name : {"parallel_tool_calls", "store"})
    if (const json* v = field(name); v && !v->is_null() && !v->is_boolean())
      return bad(fmt::format("'{}' must be a boolean", name), name);
  if (const json* v = field("metadata"); v && !v->is_null() && !v->is_object())
    return bad("'metadata' must be an object", "metadata");
  return std::nullopt;
}

/// n choices (1 to max_n); completions' best_of (n to max_n; more than n cannot stream: the best are known at
/// the end).
std::optional<api_error> read_choices(const json& body, const api_limits& limits, completion_request& r) {
  for (auto [name, out] : {std::pair{"n", &r.n}, std::pair{"best_of", &r.best_of}}) {
    if (!body.contains(name) || body.at(name).is_null()) continue;
    const json& v = body.at(name);
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > limits.max_n)
      return bad(fmt::format("'{}' must be an integer from 1 to {}", name, limits.max_n), name);
    *out = int(v.get<int64_t>());
  }
  if (!body.contains("best_of") || body.at("best_of").is_null()) r.best_of = r.n;
  if (r.best_of < r.n) return bad("best_of must be at least n", "best_of");
  if (r.best_of > r.n && r.stream) return bad("best_of above n cannot be streamed", "best_of");
  return std::nullopt;
}

/// vLLM's prompt_logprobs N: each prompt token's log probability and the N likeliest at its place, in vLLM's
/// shape; not streamed, and with echo's log probabilities only at the same N (one computation serves both).
std::optional<api_error> read_prompt_logprobs(const json& body, const api_limits& limits, completion_request& r) {
  if (!body.contains("prompt_logprobs") || body.at("prompt_logprobs").is_null()) return std::nullopt;
  const json& v = body.at("prompt_logprobs");
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > limits.max_logprobs)
    return bad(fmt::format("'prompt_logprobs' must be an integer from 0 to {}", limits.max_logprobs), "prompt_logprobs");
  r.prompt_logprobs = int(v.get<int64_t>());
  if (r.stream) return bad("prompt_logprobs cannot be streamed", "prompt_logprobs");
  if (r.echo && r.sampling.logprobs >= 0 && r.sampling.logprobs != r.prompt_logprobs)
    return bad("with echo, prompt_logprobs must equal logprobs", "prompt_logprobs");
  return std::nullopt;
}

std::optional<api_error> read_max_tokens(const json& body, const api_limits& limits, completion_request& r) {
  for (const char* name : {"max_tokens", "max_completion_tokens"}) {
    if (!body.contains(name) || body.at(name).is_null()) continue;
    const json& v = body.at(name);
    if (!v.is_number_integer()) return bad(fmt::format("'{}' must be an integer", name), name);
    const int64_t n = v.get<int64_t>();
    if (n < 1 || n > limits.max_tokens)
      return bad(fmt::format("'{}' must be between 1 and {}", name, limits.max_tokens), name);
    r.max_tokens = int(n);
  }
  return std::nullopt;
}

std::optional<api_error> read_stop(const json& body, const api_limits& limits, completion_request& r) {
  if (!body.contains("stop") || body.at("stop").is_null()) return std::nullopt;
  const json& v = body.at("stop");
  std::vector<json> items = v.is_array() ? std::vector<json>(v.begin(), v.end()) : std::vector<json>{v};
  if (int(items.size()) > limits.max_stop)
    return bad(fmt::format("at most {} stop sequences", limits.max_stop), "stop");
  for (const json& s : items) {
    if (!s.is_string() || s.get<std::string>().empty())
      return bad("'stop' must be a non-empty string or a list of them", "stop");
    r.stop.push_back(s.get<std::string>());
  }
  return std::nullopt;
}

std::optional<api_error> read_stream(const json& body, completion_request& r) {
  if (body.contains("stream") && !body.at("stream").is_null()) {
    if (!body.at("stream").is_boolean()) return bad("'stream' must be a boolean", "stream");
    r.stream = body.at("stream").get<bool>();
  }
  if (body.contains("stream_options") && !body.at("stream_options").is_null()) {
    const json& o = body.at("stream_options");
    if (!o.is_object()) return bad("'stream_options' must be an object", "stream_options");
    if (!r.stream) return bad("stream_options is only allowed with stream", "stream_options");
    for (const auto& [key, value] : o.items()) {
      if (key != "include_usage") return bad(fmt::format("unknown stream option '{}'", key), "stream_options");
      if (!value.is_boolean()) return bad("'include_usage' must be a boolean", "stream_options");
      r.include_usage = value.get<bool>();
    }
  }
  return std::nullopt;
}

/// `text`'s token ids into `ids`, or a 400 naming `param` when the tokenizer cannot split it.
std::optional<api_error> encode_into(const gpu::tokenizer& vocab, std::string_view text, bool add_special,
                                     const char* param, std::vector<int32_t>& ids) {
  auto encoded = vocab.try_encode(text, add_special);
  if (!encoded.is_ok()) return bad(encoded.error().message(), param);
  ids = std::move(encoded).value();
  return std::nullopt;
}

std::optional<api_error> read_prompt(const json& body, const gpu::tokenizer& vocab, completion_request& r) {
  if (!body.contains("prompt")) return bad("you must provide a prompt", "prompt");
  const json& p = body.at("prompt");
  if (p.is_string()) {
    if (p.get<std::string>().empty()) return bad("the prompt is empty", "prompt");
    return encode_into(vocab, p.get<std::string>(), true, "prompt", r.prompt_ids);
  }
  if (p.is_array() && p.size() == 1 && p[0].is_string()) return read_prompt(json{{"prompt", p[0]}}, vocab, r);
  if (p.is_array() && !p.empty() && std::all_of(p.begin(), p.end(), [](const json& t) { return t.is_number_integer(); })) {
    for (const json& t : p) {
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id >= vocab.vocab_size())
        return bad(fmt::format("token id {} is outside the vocabulary (0..{})", id, vocab.vocab_size() - 1), "prompt");
      r.prompt_ids.push_back(int32_t(id));
    }
    return std::nullopt;
  }
  if (p.is_array() && p.empty()) return bad("the prompt is empty", "prompt");
  return bad("'prompt' must be a string or a list of token ids (one prompt per request)", "prompt");
}

/// The text of a message's content: a string, or a list of text parts joined; nullopt when it is neither (null
/// gives "" where `null_ok`).
template <class Json>
std::optional<std::string> content_text(const Json& content, bool null_ok) {
  if (content.is_string()) return content.template get<std::string>();
  if (content.is_null() && null_ok) return std::string();
  if (!content.is_array()) return std::nullopt;
  std::string text;
  for (const Json& part : content) {
    if (!part.is_object() || part.value("type", Json()) != "text" || !part.contains("text") || !part.at("text").is_string())
      return std::nullopt;
    text += part.at("text").template get<std::string>();
  }
  return text;
}

/// Checks every message: a known role, known fields, text content. With a template, tool turns too.
std::optional<api_error> check_messages(const json& m, bool templated) {
  if (!m.is_array() || m.empty()) return bad("'messages' must be a non-empty list", "messages");
  static const std::set<std::string> plain_roles = {"system", "developer", "user", "assistant"};
  static const std::set<std::string> template_roles = {"system", "developer", "user", "assistant", "tool"};
  static const std::set<std::string> plain_fields = {"role", "content", "name"};
  static const std::set<std::string> template_fields = {"role", "content", "name", "tool_calls", "tool_call_id",
                                                        "reasoning_content"};
  const auto& roles = templated ? template_roles : plain_roles;
  const auto& fields = templated ? template_fields : plain_fields;
  for (const json& msg : m) {
    if (!msg.is_object() || !msg.contains("role") || !msg.at("role").is_string() || !roles.count(msg.at("role").get<std::string>()))
      return bad(templated ? "every message needs a role: system, developer, user, assistant or tool"
                           : "every message needs a role: system, developer, user or assistant",
                 "messages");
    for (const auto& [key, value] : msg.items())
      if (!fields.count(key)) return bad(fmt::format("unknown message field '{}'", key), "messages");
    if (!content_text(msg.value("content", json()), templated && msg.contains("tool_calls")))
      return bad("a message's content must be a string or a list of text parts", "messages");
  }
  return std::nullopt;
}

/// Chat messages through the model's template: the messages as the client ordered them (contents of text parts
/// joined), the request's add_generation_prompt (true by default) and chat_template_kwargs; the text tokenized
/// without adding BOS again (the template writes it).
std::optional<api_error> render_messages(const jinja::json& body, const gpu::tokenizer& vocab,
                                         const jinja::chat_template& chat, int max_json_depth, completion_request& r,
                                         bool add_special = false) {
  jinja::json messages = body.at("messages");
  if (auto e = prepare_tool_turns(messages, max_json_depth)) return e;
  for (jinja::json& msg : messages)
    if (msg.contains("content") && !msg["content"].is_null())
      msg["content"] = *content_text(msg["content"], true);
  const jinja::json kwargs = body.value("chat_template_kwargs", jinja::json());
  if (!kwargs.is_null() && !kwargs.is_object()) return bad("'chat_template_kwargs' must be an object", "chat_template_kwargs");
  const jinja::json generation = body.value("add_generation_prompt", jinja::json(true));
  if (!generation.is_boolean()) return bad("'add_generation_prompt' must be a boolean", "add_generation_prompt");
  jinja::json tools = body.value("tools", jinja::json());
  if (!tools.is_null() && !tools.is_array()) return bad("'tools' must be a list", "tools");
  if (tools.is_array() && tools.empty()) tools = nullptr;  // no tools, as the template sees it
  auto text = chat.render(messages, tools, generation.get<bool>(), kwargs);
  if (!text.is_ok()) return bad(text.error().message(), "messages");
  if (auto e = encode_into(vocab, text.value(), add_special, "messages", r.prompt_ids)) return e;
  if (r.prompt_ids.empty()) return bad("the chat template gave an empty prompt", "messages");
  return std::nullopt;
}

/// Chat messages become one text: their contents, one per line (a model without a chat template).
std::optional<api_error> join_messages(const json& m, const gpu::tokenizer& vocab, completion_request& r) {
  std::string text;
  for (const json& msg : m) {
    const std::string piece = *content_text(msg.value("content", json()), false);
    if (!piece.empty()) text += (text.empty() ? "" : "\n") + piece;
  }
  if (text.empty()) return bad("the messages have no text", "messages");
  return encode_into(vocab, text, true, "messages", r.prompt_ids);
}

std::optional<api_error> read_messages(const json& body, const jinja::json* ordered, const gpu::tokenizer& vocab,
                                       const jinja::chat_template* chat, int max_json_depth, completion_request& r) {
  if (!body.contains("messages")) return bad("you must provide messages", "messages");
  if (auto e = check_messages(body.at("messages"), chat != nullptr)) return e;
  return chat ? render_messages(*ordered, vocab, *chat, max_json_depth, r) : join_messages(body.at("messages"), vocab, r);
}

std::optional<api_error> read_request(endpoint kind, const json& body, const jinja::json* ordered,
                                      const gpu::tokenizer& vocab, const jinja::chat_template* chat,
                                      const api_limits& limits, const std::string& served_model,
                                      completion_request& r) {
  if (!body.is_object()) return bad("the request body must be a JSON object");
  for (const auto& [key, value] : body.items())
    if (!allowed_fields(kind).count(key)) return bad(fmt::format("Unrecognized request argument supplied: {}", key), key);
  if (!body.contains("model") || !body.at("model").is_string())
    return bad("you must provide a model parameter (a string)", "model");
  r.model = body.at("model").get<std::string>();
  if (r.model != served_model)
    return make_error(404, fmt::format("The model `{}` does not exist (this server serves `{}`)", r.model, served_model),
                      "invalid_request_error", "model", "model_not_found");
  if (auto e = check_neutral(body)) return e;
  r.max_tokens = kind == endpoint::completions ? 16 : limits.default_max_tokens;
  if (auto e = read_max_tokens(body, limits, r)) return e;
  r.sampling = limits.default_sampling;
  if (auto e = read_number(body, "temperature", 0.0, 2.0, false, r.sampling.temperature)) return e;
  if (auto e = read_number(body, "top_p", 0.0, 1.0, true, r.sampling.top_p)) return e;
  if (body.contains("cache_salt") && !body.at("cache_salt").is_null()) {
    const json& salt = body.at("cache_salt");
    if (!salt.is_string() || salt.get<std::string>().empty() || salt.get<std::string>().size() > 256)
      return bad("'cache_salt' must be a string of 1 to 256 bytes", "cache_salt");
    r.cache_salt = salt.get<std::string>();
  }
  if (body.contains("seed") && !body.at("seed").is_null()) {
    if (!body.at("seed").is_number_integer()) return bad("'seed' must be an integer", "seed");
    r.seed = uint64_t(body.at("seed").get<int64_t>());
  }
  for (auto [name, out] : {std::pair{"ignore_eos", &r.ignore_eos}, std::pair{"return_token_ids", &r.return_token_ids}}) {
    if (!body.contains(name) || body.at(name).is_null()) continue;
    if (!body.at(name).is_boolean()) return bad(fmt::format("'{}' must be a boolean", name), name);
    *out = body.at(name).get<bool>();
  }
  if (auto e = read_sampling_fields(kind, body, vocab.vocab_size(), limits, r)) return e;
  if (body.contains("echo") && !body.at("echo").is_null()) {
    if (!body.at("echo").is_boolean()) return bad("'echo' must be a boolean", "echo");
    r.echo = body.at("echo").get<bool>();
  }
  if (auto e = read_stop(body, limits, r)) return e;
  if (auto e = read_stream(body, r)) return e;
  if (auto e = read_choices(body, limits, r)) return e;
  if (auto e = read_prompt_logprobs(body, limits, r)) return e;
  if (auto e = kind == endpoint::completions ? read_prompt(body, vocab, r) : read_messages(body, ordered, vocab, chat, limits.max_json_depth, r))
    return e;
  if (int(r.prompt_ids.size()) > limits.max_prompt_tokens)
    return bad(fmt::format("the prompt has {} tokens, more than the limit of {}", r.prompt_ids.size(),
                           limits.max_prompt_tokens),
               kind == endpoint::completions ? "prompt" : "messages", "context_length_exceeded");
  if (limits.max_model_len > 0 && int64_t(r.prompt_ids.size()) + r.max_tokens > limits.max_model_len)
    return bad(fmt::format("this model's maximum context length is {} tokens; the prompt has {} and max_tokens asks "
                           "for {} more",
                           limits.max_model_len, r.prompt_ids.size(), r.max_tokens),
               "max_tokens", "context_length_exceeded");
  return std::nullopt;
}

/// Calls as a message or a delta lists them, numbered from `first`.
json tool_calls_json(std::span<const tool_call> calls, size_t first, bool indexed) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json call = {{"id", calls[i].id},
                 {"type", "function"},
                 {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (indexed) call["index"] = first + i;
    out.push_back(std::move(call));
  }
  return out;
}

/// The assistant's message of a request with tools: its content (null when it only calls) and its calls.
json tool_message(const completion_result& result) {
  json message = {{"role", "assistant"},
                  {"content", result.content.empty() && !result.tool_calls.empty() ? json() : json(result.content)}};
  if (!result.tool_calls.empty()) message["tool_calls"] = tool_calls_json(result.tool_calls, 0, false);
  return message;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

/// Usage as OpenAI reports it: cached_tokens are the prompt tokens whose KV the prefix cache held.
json usage(int prompt_tokens, int completion_tokens, int cached_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens}}}};
}

json finish(const std::string& reason) { return reason.empty() ? json() : json(reason); }

/// Length of the longest prefix of s made of whole UTF-8 characters (a cut sequence at the end is left out).
size_t whole_utf8_prefix(const std::string& s, size_t limit) {
  size_t end = std::min(limit, s.size());
  size_t i = end;
  int continuation = 0;
  while (i > 0 && continuation < 3 && (static_cast<unsigned char>(s[i - 1]) & 0xc0) == 0x80) {
    --i;
    ++continuation;
  }
  if (i == 0) return end;
  const auto lead = static_cast<unsigned char>(s[i - 1]);
  const int length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xe ? 3 : (lead >> 3) == 0x1e ? 4 : 1;
  return continuation + 1 < length && i - 1 + length > end ? i - 1 : end;
}

/// A body parsed as JSON within `limits` (size and nesting), or the error that refuses it.
std::variant<json, api_error> read_body(std::string_view body, const api_limits& limits) {
  if (body.size() > limits.max_body_bytes)
    return make_error(413, fmt::format("the request body is larger than {} bytes", limits.max_body_bytes));
  auto parsed = gpu::parse_bounded_json<json>(body, limits.max_json_depth);
  if (parsed.too_deep)
    return bad(fmt::format("the request body's arrays and objects nest deeper than {} levels (max_json_depth)",
                           limits.max_json_depth));
  if (!parsed.value) return bad("the request body is not valid JSON (or not valid UTF-8): " + parsed.error);
  return std::move(*parsed.value);
}

}  // namespace

std::variant<completion_request, api_error> parse_request(endpoint kind, std::string_view body,
                                                          const gpu::tokenizer& vocab, const api_limits& limits,
                                                          const std::string& served_model,
                                                          const jinja::chat_template* chat) {
  auto read = read_body(body, limits);
  if (auto* e = std::get_if<api_error>(&read)) return *e;
  const json parsed = std::move(std::get<json>(read));
  completion_request r;
  r.kind = kind;
  // A template sees the messages in the client's order (tool arguments' keys above all), and a schema's properties
  // are written in it: parsed again, ordered.
  const bool templated = kind == endpoint::chat_completions && chat;
  const bool ordered_needed =
      templated || (parsed.is_object() && (parsed.contains("response_format") || parsed.contains("tools") ||
                                           parsed.contains("tool_choice")));
  const jinja::json ordered = ordered_needed ? jinja::json::parse(body, nullptr, false) : jinja::json();
  if (ordered_needed) {  // tools are checked before the template sees them
    if (auto e = read_response_format(ordered, limits, r)) return *e;
    if (kind == endpoint::chat_completions)
      if (auto e = read_tools(ordered, chat, limits, r)) return *e;
  }
  if (auto e = read_request(kind, parsed, templated ? &ordered : nullptr, vocab, chat, limits, served_model, r)) return *e;
  return r;
}

std::string error_body(const api_error& e) {
  return dump({{"error",
                {{"message", e.message},
                 {"type", e.type},
                 {"param", e.param.empty() ? json() : json(e.param)},
                 {"code", e.code.empty() ? json() : json(e.code)}}}});
}

std::string response_body(const completion_request& r, const std::string& id, int64_t created,
                          const completion_result& result, const gpu::tokenizer* vocab) {
  return response_body(r, id, created, std::span(&result, 1), result.completion_tokens, vocab);
}

namespace {

/// One choice of a response, numbered `index`.
json choice_json(const completion_request& r, size_t index, const completion_result& result,
                 const gpu::tokenizer* vocab) {
  json choice = {{"index", index}, {"logprobs", nullptr}, {"finish_reason", result.finish_reason}};
  const bool echo = r.echo && vocab;
  if (r.sampling.logprobs >= 0 && vocab && echo) {
    std::vector<int32_t> ids = r.prompt_ids;
    ids.insert(ids.end(), result.token_ids.begin(), result.token_ids.end());
    std::vector<gpu::token_logprobs> values = result.prompt_logprobs;
    values.resize(r.prompt_ids.size());
    values.insert(values.end(), result.logprobs.begin(), result.logprobs.end());
    choice["logprobs"] = logprobs_json(r.kind, {vocab, ids, values, -1, 0, 1});
  } else if (r.sampling.logprobs >= 0 && vocab) {
    choice["logprobs"] = logprobs_json(r.kind, {vocab, result.token_ids, result.logprobs, r.prompt_ids.back(), 0});
  }
  if (r.kind == endpoint::completions)
    choice["text"] = echo ? echoed_text(r, *vocab) + result.text : result.text;
  else if (r.call_syntax == tool_syntax::none)
    choice["message"] = {{"role", "assistant"}, {"content", result.text}};
  else
    choice["message"] = tool_message(result);
  if (r.return_token_ids) {
    choice["token_ids"] = result.token_ids;
    choice["prompt_token_ids"] = r.prompt_ids;
  }
  if (r.prompt_logprobs >= 0 && vocab && r.kind == endpoint::completions)
    choice["prompt_logprobs"] = vllm_prompt_logprobs(*vocab, r.prompt_ids, result.prompt_logprobs);
  return choice;
}

}  // namespace

std::string response_body(const completion_request& r, const std::string& id, int64_t created,
                          std::span<const completion_result> choices, int completion_tokens,
                          const gpu::tokenizer* vocab) {
  json listed = json::array();
  for (size_t i = 0; i < choices.size(); ++i) listed.push_back(choice_json(r, i, choices[i], vocab));
  const int prompt_tokens = choices.empty() ? 0 : choices.front().prompt_tokens;
  const int cached_tokens = choices.empty() ? 0 : choices.front().cached_tokens;
  json body = {{"id", id},
               {"object", r.kind == endpoint::completions ? "text_completion" : "chat.completion"},
               {"created", created},
               {"model", r.model},
               {"choices", listed},
               {"usage", usage(prompt_tokens, completion_tokens, cached_tokens)}};
  if (r.prompt_logprobs >= 0 && vocab && r.kind == endpoint::chat_completions && !choices.empty())
    body["prompt_logprobs"] = vllm_prompt_logprobs(*vocab, r.prompt_ids, choices.front().prompt_logprobs);
  return dump(body);
}

std::string stream_chunk(const completion_request& r, const std::string& id, int64_t created, const std::string& text,
                         const std::string& finish_reason, bool first, const std::vector<int32_t>& token_ids,
                         const logprobs_part* logprobs, std::span<const tool_call> calls, size_t first_call) {
  json choice = {{"index", r.choice}, {"logprobs", nullptr}, {"finish_reason", finish(finish_reason)}};
  if (logprobs && logprobs->vocab) choice["logprobs"] = logprobs_json(r.kind, *logprobs);
  if (r.return_token_ids) {
    choice["token_ids"] = token_ids;
    if (first) choice["prompt_token_ids"] = r.prompt_ids;
  }
  if (r.kind == endpoint::completions) {
    choice["text"] = text;
  } else {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason.empty() && calls.empty())) delta["content"] = text;
    if (!calls.empty()) delta["tool_calls"] = tool_calls_json(calls, first_call, true);
    choice["delta"] = delta;
  }
  return "data: " +
         dump({{"id", id},
               {"object", r.kind == endpoint::completions ? "text_completion" : "chat.completion.chunk"},
               {"created", created},
               {"model", r.model},
               {"choices", json::array({choice})}}) +
         "\n\n";
}

std::string echoed_text(const completion_request& r, const gpu::tokenizer& vocab) {
  return vocab.decode(r.prompt_ids, -1);
}

std::string stream_usage(const completion_request& r, const std::string& id, int64_t created, int prompt_tokens,
                         int completion_tokens, int cached_tokens) {
  return "data: " +
         dump({{"id", id},
               {"object", r.kind == endpoint::completions ? "text_completion" : "chat.completion.chunk"},
               {"created", created},
               {"model", r.model},
               {"choices", json::array()},
               {"usage", usage(prompt_tokens, completion_tokens, cached_tokens)}}) +
         "\n\n";
}

namespace {

/// The model a helper request names, when it names one: it must be the one served.
std::optional<api_error> check_model(const json& body, const std::string& served_model) {
  if (!body.contains("model") || body.at("model").is_null()) return std::nullopt;
  if (!body.at("model").is_string() || body.at("model").get<std::string>() != served_model)
    return make_error(404, fmt::format("The model `{}` does not exist (this server serves `{}`)", body.at("model").dump(),
                                       served_model),
                      "invalid_request_error", "model", "model_not_found");
  return std::nullopt;
}

std::optional<bool> flag(const json& body, const char* name, bool fallback) {
  if (!body.contains(name) || body.at(name).is_null()) return fallback;
  if (!body.at(name).is_boolean()) return std::nullopt;
  return body.at(name).get<bool>();
}

}  // namespace

std::variant<std::string, api_error> tokenize_body(std::string_view body, const gpu::tokenizer& vocab,
                                                   const jinja::chat_template* chat, const api_limits& limits,
                                                   const std::string& served_model) {
  auto read = read_body(body, limits);
  if (auto* e = std::get_if<api_error>(&read)) return *e;
  const json parsed = std::move(std::get<json>(read));
  if (!parsed.is_object()) return bad("the request body must be a JSON object");
  if (auto e = check_model(parsed, served_model)) return *e;
  completion_request r;
  const bool chat_form = parsed.contains("messages");
  const auto add_special = flag(parsed, "add_special_tokens", !chat_form);
  if (!add_special) return bad("'add_special_tokens' must be a boolean", "add_special_tokens");
  if (chat_form) {
    if (auto e = check_messages(parsed.at("messages"), chat != nullptr)) return *e;
    if (chat) {
      if (auto e = render_messages(jinja::json::parse(body), vocab, *chat, limits.max_json_depth, r, *add_special)) return *e;
    } else if (auto e = join_messages(parsed.at("messages"), vocab, r)) {
      return *e;
    }
  } else if (parsed.contains("prompt") && parsed.at("prompt").is_string()) {
    if (auto e = encode_into(vocab, parsed.at("prompt").get<std::string>(), *add_special, "prompt", r.prompt_ids))
      return *e;
  } else {
    return bad("give 'prompt' (a string) or 'messages'", "prompt");
  }
  return dump({{"tokens", r.prompt_ids},
               {"count", r.prompt_ids.size()},
               {"max_model_len", limits.max_model_len > 0 ? json(limits.max_model_len) : json()}});
}

std::variant<std::string, api_error> detokenize_body(std::string_view body, const gpu::tokenizer& vocab,
                                                     const api_limits& limits, const std::string& served_model) {
  auto read = read_body(body, limits);
  if (auto* e = std::get_if<api_error>(&read)) return *e;
  const json parsed = std::move(std::get<json>(read));
  if (!parsed.is_object()) return bad("the request body must be a JSON object");
  if (auto e = check_model(parsed, served_model)) return *e;
  if (!parsed.contains("tokens") || !parsed.at("tokens").is_array()) return bad("'tokens' must be a list of token ids", "tokens");
  std::vector<int32_t> ids;
  for (const json& id : parsed.at("tokens")) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab.vocab_size())
      return bad(fmt::format("token id {} is outside the vocabulary (0..{})", id.dump(), vocab.vocab_size() - 1), "tokens");
    ids.push_back(int32_t(id.get<int64_t>()));
  }
  return dump({{"prompt", vocab.decode_text(ids, false)}});
}

std::string models_body(const std::string& model, int64_t created, int max_model_len) {
  return dump({{"object", "list"},
               {"data", json::array({{{"id", model}, {"object", "model"}, {"created", created},
                                      {"owned_by", "infinite-llm"},
                                      {"max_model_len", max_model_len > 0 ? json(max_model_len) : json()}}})}});
}

text_stream::text_stream(const gpu::tokenizer& vocab, int32_t last_prompt_token, std::vector<std::string> stop)
    : vocab_(vocab), prev_(last_prompt_token), stop_(std::move(stop)) {}

std::string text_stream::push(int32_t token) {
  if (stopped_) return {};
  pending_ += vocab_.decode(prev_, token);
  prev_ = token;
  size_t first_stop = std::string::npos, longest = 0;
  for (const std::string& s : stop_) {
    first_stop = std::min(first_stop, pending_.find(s));
    longest = std::max(longest, s.size());
  }
  if (first_stop != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first_stop);
    pending_.clear();
    return out;
  }
  // Hold back what could be the start of a stop string, and a cut UTF-8 character.
  const size_t held = longest ? longest - 1 : 0;
  const size_t safe = pending_.size() >= held ? pending_.size() - held : 0;
  const size_t release = whole_utf8_prefix(pending_, safe);
  std::string out = pending_.substr(0, release);
  pending_.erase(0, release);
  return out;
}

std::string text_stream::finish() { return std::exchange(pending_, {}); }

}  // namespace illm::actors::frontend
