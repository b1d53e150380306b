// The OpenAI request checks: every malformed, mistyped, unknown or out-of-range field is a 4xx with an
// OpenAI-style error naming the parameter; valid requests (text, token ids, chat messages) become the
// right prompt; streamed text is released in whole UTF-8 characters and cut at stop strings.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "actors/frontend/openai_api.hpp"
#include "gpu/model_files.hpp"

using namespace illm;
using namespace illm::actors::frontend;

namespace {

const gpu::tokenizer& vocab() {
  static const auto model = gpu::load_model("stories15M");
  if (!model.is_ok()) FAIL("stories15M is needed: run deploy/fetch-model.sh");
  return *model->vocab;
}

api_error error_of(endpoint kind, const std::string& body, api_limits limits = {}) {
  auto r = parse_request(kind, body, vocab(), limits, "stories15M");
  REQUIRE_MESSAGE(std::holds_alternative<api_error>(r), body);
  return std::get<api_error>(r);
}

completion_request ok(endpoint kind, const std::string& body) {
  auto r = parse_request(kind, body, vocab(), {}, "stories15M");
  if (auto* e = std::get_if<api_error>(&r)) FAIL(body, " -> ", e->message);
  return std::get<completion_request>(r);
}

}  // namespace

TEST_SUITE("actors") {
  TEST_CASE("bad requests get 4xx errors that name the parameter") {
    const auto c = endpoint::completions;
    CHECK(error_of(c, "{not json").status == 400);
    CHECK(error_of(c, "[1,2]").message.find("object") != std::string::npos);
    CHECK(error_of(c, "{\"model\":\"stories15M\",\"prompt\":\"\\xff\\xfe\"}").status == 400);  // not UTF-8
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","bogus":1})").param == "bogus");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":""})").param == "prompt");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":[]})").param == "prompt");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":[1, 99999]})").param == "prompt");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":42})").param == "prompt");
    CHECK(error_of(c, R"({"prompt":"hi"})").param == "model");
    const api_error wrong_model = error_of(c, R"({"model":"gpt-4","prompt":"hi"})");
    CHECK(wrong_model.status == 404);
    CHECK(wrong_model.code == "model_not_found");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","max_tokens":-1})").param == "max_tokens");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","max_tokens":100000000})").param == "max_tokens");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","max_tokens":"5"})").param == "max_tokens");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","max_tokens":1.5})").param == "max_tokens");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","temperature":3})").param == "temperature");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","top_p":0})").param == "top_p");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","stream":"yes"})").param == "stream");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","stream_options":{"include_usage":true}})").param ==
          "stream_options");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","prompt_logprobs":21})").param == "prompt_logprobs");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","prompt_logprobs":1,"stream":true})").param ==
          "prompt_logprobs");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","prompt_logprobs":1,"echo":true,"logprobs":2})").param ==
          "prompt_logprobs");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","n":0})").param == "n");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","n":17})").param == "n");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","n":3,"best_of":2})").param == "best_of");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","best_of":2,"stream":true})").param == "best_of");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","stop":["a","b","c","d","e"]})").param == "stop");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","stop":[""]})").param == "stop");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","seed":"x"})").param == "seed");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","presence_penalty":2.5})").param == "presence_penalty");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","repetition_penalty":0})").param == "repetition_penalty");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","top_k":-2})").param == "top_k");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","min_p":1.5})").param == "min_p");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","max_tokens":4,"min_tokens":5})").param == "min_tokens");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","logit_bias":{"x":1}})").param == "logit_bias");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","logit_bias":{"99999":1}})").param == "logit_bias");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","logit_bias":{"5":101}})").param == "logit_bias");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","logit_bias":[1]})").param == "logit_bias");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","stop_token_ids":[-1]})").param == "stop_token_ids");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","logprobs":21})").param == "logprobs");
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","logprobs":1,"echo":"yes"})").param == "echo");
    CHECK(error_of(endpoint::chat_completions,
                   R"({"model":"stories15M","messages":[{"role":"user","content":"x"}],"echo":true})").param == "echo");
    api_limits few;
    few.max_logit_bias = 1;
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"hi","logit_bias":{"5":1,"6":2}})", few).param == "logit_bias");
    api_limits small;
    small.max_prompt_tokens = 3;
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"Once upon a time"})", small).code == "context_length_exceeded");
    small.max_body_bytes = 10;
    CHECK(error_of(c, R"({"model":"stories15M","prompt":"Once upon a time"})", small).status == 413);
    const auto chat = endpoint::chat_completions;
    CHECK(error_of(chat, R"({"model":"stories15M","messages":[]})").param == "messages");
    CHECK(error_of(chat, R"({"model":"stories15M","messages":[{"role":"robot","content":"x"}]})").param == "messages");
    CHECK(error_of(chat, R"({"model":"stories15M","messages":[{"role":"user","content":5}]})").param == "messages");
    CHECK(error_of(chat, R"({"model":"stories15M","messages":[{"role":"user","content":"x"}],"prompt":"x"})").param ==
          "prompt");
    CHECK(error_of(chat, R"({"model":"stories15M","messages":[{"role":"user","content":"x"}],"top_logprobs":2})")
              .param == "top_logprobs");
    CHECK(error_of(chat, R"({"model":"stories15M","messages":[{"role":"user","content":"x"}],"logprobs":3})").param ==
          "logprobs");
  }

  TEST_CASE("a body nested past max_json_depth is refused while it is parsed, at its bound it is read") {
    const auto nested = [](int depth) {  // {"model": ..., "messages": [...], "metadata": {"a": [[...]]}}
      return R"({"model":"stories15M","messages":[{"role":"user","content":"hi"}],"metadata":{"a":)" +
             std::string(size_t(depth - 2), '[') + std::string(size_t(depth - 2), ']') + "}}";
    };
    const auto chat = endpoint::chat_completions;
    api_limits limits;
    limits.max_json_depth = 16;
    const auto at_bound = parse_request(chat, nested(16), vocab(), limits, "stories15M");
    CHECK_MESSAGE(std::holds_alternative<completion_request>(at_bound), std::get<api_error>(at_bound).message);
    const api_error deep = error_of(chat, nested(17), limits);
    CHECK(deep.status == 400);
    CHECK(deep.message.find("max_json_depth") != std::string::npos);
    // 400,000 levels (800 KB): refused without walking them, within the default body size
    limits = {};
    const std::string huge = nested(400'000);
    REQUIRE(huge.size() < limits.max_body_bytes);
    CHECK(error_of(chat, huge, limits).message.find("deeper than 128") != std::string::npos);
    CHECK(std::get<api_error>(tokenize_body(huge, vocab(), nullptr, limits, "stories15M")).status == 400);
    CHECK(std::get<api_error>(detokenize_body(huge, vocab(), limits, "stories15M")).status == 400);
    // Brackets inside strings do not count
    std::string brackets = R"({"model":"stories15M","prompt":")";
    brackets.append(1000, '[').append(R"(\"{"})");
    const auto in_string = parse_request(endpoint::completions, brackets, vocab(), limits, "stories15M");
    CHECK_MESSAGE(std::holds_alternative<completion_request>(in_string), std::get<api_error>(in_string).message);
  }

  TEST_CASE("a model's sampling defaults apply to a request that gives none; cache_salt is read") {
    api_limits limits;
    gpu::generation_defaults model;  // as Qwen3's generation_config.json: temperature 0.6, top_p 0.95, top_k 20
    model.temperature = 0.6f;
    model.top_p = 0.95f;
    model.top_k = 20;
    model.min_p = 0.05f;
    model.repetition_penalty = 1.1f;
    limits.default_sampling = model.over(limits.default_sampling);
    const auto plain = parse_request(endpoint::completions, R"({"model":"stories15M","prompt":"hi"})", vocab(), limits,
                                     "stories15M");
    const gpu::sampling_params& p = std::get<completion_request>(plain).sampling;
    CHECK(p.temperature == 0.6f);
    CHECK(p.top_p == 0.95f);
    CHECK(p.top_k == 20);
    CHECK(p.min_p == 0.05f);
    CHECK(p.repetition_penalty == 1.1f);
    const auto given = parse_request(endpoint::completions,
                                     R"({"model":"stories15M","prompt":"hi","top_k":5,"temperature":1,"cache_salt":"t1"})",
                                     vocab(), limits, "stories15M");
    const completion_request& r = std::get<completion_request>(given);
    CHECK(r.sampling.top_k == 5);
    CHECK(r.sampling.temperature == 1.0f);
    CHECK(r.sampling.min_p == 0.05f);  // what the request leaves out stays the model's
    CHECK(r.cache_salt == "t1");
    CHECK(error_of(endpoint::completions, R"({"model":"stories15M","prompt":"hi","cache_salt":""})").param ==
          "cache_salt");
    CHECK(error_of(endpoint::chat_completions,
                   R"({"model":"stories15M","messages":[{"role":"user","content":"x"}],"cache_salt":7})")
              .param == "cache_salt");
  }

  TEST_CASE("valid requests become prompts and options") {
    const completion_request text = ok(endpoint::completions, R"({"model":"stories15M","prompt":"Once upon a time",
        "max_tokens":7,"temperature":0,"top_p":0.5,"seed":3,"stop":"\n","stream":true,
        "stream_options":{"include_usage":true},"n":1,"logprobs":null,"user":"u","ignore_eos":true})");
    CHECK(text.prompt_ids == std::vector<int32_t>{1, 9038, 2501, 263, 931});
    CHECK(text.max_tokens == 7);
    CHECK(text.sampling.temperature == 0.0f);
    CHECK(text.sampling.top_p == 0.5f);
    CHECK(text.seed == 3u);
    CHECK(text.stop == std::vector<std::string>{"\n"});
    CHECK(text.stream);
    CHECK(text.include_usage);
    CHECK(text.ignore_eos);
    CHECK(ok(endpoint::completions, R"({"model":"stories15M","prompt":[1,9038,2501]})").prompt_ids ==
          std::vector<int32_t>{1, 9038, 2501});
    CHECK(ok(endpoint::completions, R"({"model":"stories15M","prompt":"hi"})").max_tokens == 16);  // OpenAI's default
    const completion_request chat = ok(endpoint::chat_completions, R"({"model":"stories15M","messages":[
        {"role":"system","content":"Once upon"},{"role":"user","content":[{"type":"text","text":"a time"}]}],
        "max_completion_tokens":9})");
    CHECK(chat.prompt_ids == vocab().encode("Once upon\na time", true));
    CHECK(chat.max_tokens == 9);
    CHECK(chat.sampling.logprobs == -1);
    const completion_request sampled = ok(endpoint::completions, R"({"model":"stories15M","prompt":"hi",
        "top_k":40,"min_p":0.05,"presence_penalty":0.5,"frequency_penalty":-0.5,"repetition_penalty":1.2,
        "logit_bias":{"13":-100,"29871":5.5},"min_tokens":3,"stop_token_ids":[13],"logprobs":2})");
    CHECK(sampled.sampling.top_k == 40);
    CHECK(sampled.sampling.min_p == 0.05f);
    CHECK(sampled.sampling.presence_penalty == 0.5f);
    CHECK(sampled.sampling.frequency_penalty == -0.5f);
    CHECK(sampled.sampling.repetition_penalty == 1.2f);
    CHECK(sampled.sampling.logit_bias == std::vector<std::pair<int32_t, float>>{{13, -100.0f}, {29871, 5.5f}});
    CHECK(sampled.sampling.min_tokens == 3);
    CHECK(sampled.stop_token_ids == std::vector<int32_t>{13});
    CHECK(sampled.sampling.logprobs == 2);
    CHECK(ok(endpoint::completions, R"({"model":"stories15M","prompt":"hi","top_k":-1})").sampling.top_k == 0);
    CHECK(ok(endpoint::chat_completions, R"({"model":"stories15M","messages":[{"role":"user","content":"x"}],
        "logprobs":true,"top_logprobs":3})").sampling.logprobs == 3);
    CHECK(ok(endpoint::chat_completions, R"({"model":"stories15M","messages":[{"role":"user","content":"x"}],
        "logprobs":true})").sampling.logprobs == 0);
  }

  TEST_CASE("log probabilities follow the completions and chat shapes") {
    const std::vector<int32_t> ids = {9038, 2501};
    const std::vector<gpu::token_logprobs> values = {{-0.5f, {9038, 263}, {-0.5f, -1.5f}}, {-2.0f, {263}, {-0.25f}}};
    const completion_request text = ok(endpoint::completions, R"({"model":"stories15M","prompt":"a","logprobs":1})");
    completion_result result{"x", "length", 2, 2, ids, values};
    const auto body = nlohmann::json::parse(response_body(text, "cmpl-1", 7, result, &vocab()));
    const auto& lp = body["choices"][0]["logprobs"];
    const int32_t before = text.prompt_ids.back();
    CHECK(lp["tokens"] == nlohmann::json({vocab().decode(before, 9038), vocab().decode(9038, 2501)}));
    CHECK(lp["token_logprobs"] == nlohmann::json({-0.5, -2.0}));
    CHECK(lp["top_logprobs"][1].size() == 2);  // the alternative and the chosen token
    CHECK(lp["text_offset"][0] == 0);
    CHECK(lp["text_offset"][1] == vocab().decode(before, 9038).size());
    const completion_request chat = ok(endpoint::chat_completions,
                                       R"({"model":"stories15M","messages":[{"role":"user","content":"x"}],
                                           "logprobs":true,"top_logprobs":1})");
    const logprobs_part part{&vocab(), ids, values, chat.prompt_ids.back(), 0};
    const auto chunk = nlohmann::json::parse(stream_chunk(chat, "c", 7, "xy", "", true, ids, &part).substr(6));
    const auto& content = chunk["choices"][0]["logprobs"]["content"];
    REQUIRE(content.size() == 2);
    CHECK(content[0]["logprob"] == -0.5);
    CHECK(content[0]["top_logprobs"][0]["logprob"] == -0.5);
    CHECK(content[1]["bytes"].is_array());
    CHECK(content[1]["top_logprobs"].size() == 2 - 1);
  }

  TEST_CASE("bodies follow the OpenAI shapes") {
    const completion_request r = ok(endpoint::chat_completions, R"({"model":"stories15M","messages":[{"role":"user","content":"x"}]})");
    const auto body = nlohmann::json::parse(response_body(r, "chatcmpl-1", 7, {"hello", "stop", 3, 1}));
    CHECK(body["object"] == "chat.completion");
    CHECK(body["choices"][0]["message"]["content"] == "hello");
    CHECK(body["usage"]["total_tokens"] == 4);
    const std::string first = stream_chunk(r, "chatcmpl-1", 7, "he", "", true);
    CHECK(first.rfind("data: ", 0) == 0);
    CHECK(first.substr(first.size() - 2) == "\n\n");
    const auto chunk = nlohmann::json::parse(first.substr(6));
    CHECK(chunk["choices"][0]["delta"]["role"] == "assistant");
    CHECK(chunk["choices"][0]["finish_reason"].is_null());
    const auto e = nlohmann::json::parse(error_body(make_error(429, "busy", "rate_limit_error")));
    CHECK(e["error"]["message"] == "busy");
    CHECK(e["error"]["param"].is_null());
  }

  TEST_CASE("streamed text is released in whole characters and cut at a stop string") {
    // Byte tokens 3 + 0xe2, 0x82, 0xac spell a euro sign over three tokens.
    text_stream euro(vocab(), 1, {});
    CHECK(euro.push(3 + 0xe2).empty());
    CHECK(euro.push(3 + 0x82).empty());
    CHECK(euro.push(3 + 0xac) == "\xe2\x82\xac");
    const std::vector<int32_t> ids = vocab().encode("She said the end. Then more.", false);
    text_stream stopped(vocab(), 1, {" end."});
    std::string out;
    for (int32_t t : ids) {
      out += stopped.push(t);
      if (stopped.stopped()) break;
    }
    CHECK(stopped.stopped());
    CHECK(out == "She said the");
  }
}
