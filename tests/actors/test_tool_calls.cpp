// Tools on the chat API: the tool fields checked against the model's chat template (a 400 naming the field for
// what cannot run), tool_choice required and a named function made one call by a constraint in the template's own
// syntax, assistant tool calls made ready for the template, and the output's calls parsed in Qwen's <tool_call>
// tags and Llama 3.1's bare JSON, the same whether the output comes whole or a byte at a time.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "actors/frontend/openai_api.hpp"
#include "actors/frontend/tool_calls.hpp"
#include "actors/frontend/tool_fields.hpp"
#include "gpu/grammar/constraint_cache.hpp"
#include "gpu/jinja/chat_template.hpp"
#include "gpu/model_files.hpp"

using namespace illm;
using namespace illm::actors::frontend;

namespace {

const std::shared_ptr<const gpu::tokenizer>& vocab() {
  static const auto model = gpu::load_model("stories15M");
  if (!model.is_ok()) FAIL("stories15M is needed: run deploy/fetch-model.sh");
  static const std::shared_ptr<const gpu::tokenizer> v = model->vocab;
  return v;
}

/// A template that lists the tools and the turns, teaching `marker` (Qwen's <tool_call> or not).
jinja::chat_template template_with(const std::string& marker) {
  const std::string source =
      "{% if tools %}{% for t in tools %}{{ t.function.name }};{% endfor %}" + marker +
      "{% endif %}{% for m in messages %}{{ m.role }}: {{ m.content }}"
      "{% if m.tool_calls %}{% for c in m.tool_calls %}{{ c.function.name }}({{ c.function.arguments.city }})"
      "{% endfor %}{% endif %}\n{% endfor %}";
  return jinja::chat_template::create(source, "<s>", "</s>", "test").value();
}

std::variant<completion_request, api_error> chat(const std::string& fields, const jinja::chat_template* t) {
  const std::string body = R"({"model":"m","messages":[{"role":"user","content":"Weather in Paris?"}])" + fields + "}";
  return parse_request(endpoint::chat_completions, body, *vocab(), {}, "m", t);
}

std::string param_of(const std::variant<completion_request, api_error>& r) {
  REQUIRE(std::holds_alternative<api_error>(r));
  return std::get<api_error>(r).param;
}

const std::string weather = R"(,"tools":[{"type":"function","function":{"name":"get_weather","parameters":
    {"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}},
    {"type":"function","function":{"name":"get_time"}}])";

/// The parser's split of `text`, given whole or a byte at a time (both must agree).
tool_call_parser::piece split(tool_syntax syntax, const std::string& text) {
  const std::vector<std::string> names = {"get_weather", "get_time"};
  tool_call_parser whole(syntax, names, "call_"), bytes(syntax, names, "call_");
  tool_call_parser::piece a = whole.push(text), b;
  const tool_call_parser::piece rest = whole.finish();
  a.content += rest.content;
  a.calls.insert(a.calls.end(), rest.calls.begin(), rest.calls.end());
  for (char c : text) {
    tool_call_parser::piece p = bytes.push(std::string(1, c));
    b.content += p.content;
    b.calls.insert(b.calls.end(), p.calls.begin(), p.calls.end());
  }
  const tool_call_parser::piece last = bytes.finish();
  b.content += last.content;
  b.calls.insert(b.calls.end(), last.calls.begin(), last.calls.end());
  CHECK_MESSAGE(a.content == b.content, text);
  REQUIRE(a.calls.size() == b.calls.size());
  for (size_t i = 0; i < a.calls.size(); ++i) CHECK(a.calls[i].arguments == b.calls[i].arguments);
  return a;
}

}  // namespace

TEST_SUITE("actors") {
  TEST_CASE("tools: what cannot run is a 400 naming its field") {
    const jinja::chat_template qwen = template_with("<tool_call>");
    const jinja::chat_template no_tools = jinja::chat_template::create(
        "{% for m in messages %}{{ m.content }}{% endfor %}", "<s>", "</s>", "test").value();
    CHECK(param_of(chat(weather, nullptr)) == "tools");  // no chat template
    CHECK(param_of(chat(weather, &no_tools)) == "tools");  // a template that takes no tools
    CHECK(param_of(chat(R"(,"tools":{"a":1})", &qwen)) == "tools");
    CHECK(param_of(chat(R"(,"tools":[{"type":"function","function":{"name":"bad name"}}])", &qwen)) == "tools");
    CHECK(param_of(chat(R"(,"tools":[{"type":"code","function":{"name":"f"}}])", &qwen)) == "tools");
    CHECK(param_of(chat(R"(,"tools":[{"type":"function","function":{"name":"f","parameters":3}}])", &qwen)) == "tools");
    CHECK(param_of(chat(R"(,"tool_choice":"required")", &qwen)) == "tool_choice");  // no tools
    CHECK(param_of(chat(weather + R"(,"tool_choice":"sometimes")", &qwen)) == "tool_choice");
    CHECK(param_of(chat(weather + R"(,"tool_choice":{"type":"function","function":{"name":"nope"}})", &qwen)) ==
          "tool_choice");
    CHECK(param_of(chat(weather + R"(,"tool_choice":"required","response_format":{"type":"json_object"})", &qwen)) ==
          "tool_choice");
    api_limits few;
    few.max_tools = 1;
    const std::string body = R"({"model":"m","messages":[{"role":"user","content":"x"}])" + weather + "}";
    const auto r = parse_request(endpoint::chat_completions, body, *vocab(), few, "m", &qwen);
    CHECK(param_of(r) == "tools");
    // An assistant call whose arguments are not a JSON object.
    CHECK(param_of(chat(weather + R"(,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":null,
        "tool_calls":[{"id":"c","type":"function","function":{"name":"get_weather","arguments":"{oops"}}]}])",
                        &qwen)) == "messages");
  }

  TEST_CASE("tools: auto parses the output's calls; required and a named function constrain it to one call") {
    const jinja::chat_template qwen = template_with("<tool_call>"), llama = template_with("{\"parameters\"}");
    auto r = std::get<completion_request>(chat(weather, &qwen));
    CHECK(r.call_syntax == tool_syntax::hermes);
    CHECK(r.tool_names == std::vector<std::string>{"get_weather", "get_time"});
    CHECK(r.constraint.empty());
    CHECK(vocab()->decode_text(r.prompt_ids, true).find("get_weather;get_time;") != std::string::npos);
    r = std::get<completion_request>(chat(weather + R"(,"tool_choice":"none")", &qwen));
    CHECK(r.call_syntax == tool_syntax::none);
    r = std::get<completion_request>(chat(weather + R"(,"tool_choice":{"type":"function","function":{"name":"get_weather"}})", &llama));
    CHECK(r.call_syntax == tool_syntax::json);
    CHECK(r.tool_call_required);
    // The constraint reads a call in the template's syntax and nothing else.
    gpu::grammar::constraint_cache cache(vocab());
    for (const auto& [t, syntax] : {std::pair{&qwen, "hermes"}, std::pair{&llama, "json"}}) {
      const auto req = std::get<completion_request>(chat(weather + R"(,"tool_choice":"required")", t));
      auto made = cache.get(req.constraint);
      REQUIRE_MESSAGE(made.is_ok(), made.error().message());
      const auto& g = made.value()->rules();
      const std::string call = std::string(syntax) == "hermes"
                                   ? "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"
                                   : "{\"name\": \"get_time\", \"parameters\": {}}";
      gpu::grammar::match_state s = gpu::grammar::start_state(g);
      CHECK_MESSAGE((gpu::grammar::advance(g, s, call) && s.accepts()), call);
      s = gpu::grammar::start_state(g);
      CHECK_FALSE(gpu::grammar::advance(g, s, "Sure! " + call));
    }
    // Assistant calls reach the template with their arguments as objects.
    r = std::get<completion_request>(chat(weather + R"(,"messages":[{"role":"user","content":"x"},{"role":"assistant",
        "content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"get_weather",
        "arguments":"{\"city\": \"Oslo\"}"}}]},{"role":"tool","tool_call_id":"c","content":"-3 C"}])", &qwen));
    const std::string prompt = vocab()->decode_text(r.prompt_ids, true);
    CHECK_MESSAGE(prompt.find("get_weather(Oslo)") != std::string::npos, prompt);
    CHECK_MESSAGE(prompt.find("tool: -3 C") != std::string::npos, prompt);
  }

  TEST_CASE("tool calls: Qwen's tags and Llama's JSON parsed the same whole and a byte at a time") {
    auto p = split(tool_syntax::hermes, "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
                                        "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_time\", "
                                        "\"arguments\": {}}\n</tool_call>");
    CHECK(p.content == "Let me look.");
    REQUIRE(p.calls.size() == 2);
    CHECK(p.calls[0].name == "get_weather");
    CHECK(p.calls[0].arguments == R"({"city":"Paris"})");
    CHECK(p.calls[0].id == "call_0");
    CHECK(p.calls[1].id == "call_1");
    p = split(tool_syntax::hermes, "a < b, and <tool_ca is no tag");  // text like a tag's start is content
    CHECK(p.content == "a < b, and <tool_ca is no tag");
    CHECK(p.calls.empty());
    for (const char* content : {"<tool_call>\n{\"name\": \"unknown\", \"arguments\": {}}\n</tool_call>",
                                "<tool_call>\n{broken\n</tool_call>", "<tool_call>\n{\"name\": \"get_time\", \"arg"}) {
      p = split(tool_syntax::hermes, content);  // no call: the text stays content
      CHECK(p.calls.empty());
      CHECK(p.content == content);
    }
    p = split(tool_syntax::json, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}");
    REQUIRE(p.calls.size() == 1);
    CHECK(p.calls[0].arguments == R"({"city":"Rome"})");
    CHECK(p.content.empty());
    p = split(tool_syntax::json, R"({"name": "get_time", "parameters": {}}; {"name": "get_weather", "parameters": {"city": "Oslo"}})");
    CHECK(p.calls.size() == 2);
    p = split(tool_syntax::json, R"([{"name": "get_time", "arguments": "{}"}])");
    CHECK(p.calls.size() == 1);
    p = split(tool_syntax::json, "It is sunny {\"a\": 1}");
    CHECK(p.calls.empty());
    CHECK(p.content == "It is sunny {\"a\": 1}");
    p = split(tool_syntax::json, "{\"name\": \"get_time\", \"parameters\": {}");  // cut: content
    CHECK(p.calls.empty());
    CHECK(p.content == "{\"name\": \"get_time\", \"parameters\": {}");
  }

  TEST_CASE("tool calls: parallel_tool_calls false keeps the first call of an output, in either syntax") {
    const std::vector<std::string> names = {"get_weather", "get_time"};
    for (const auto& [syntax, text] : {std::pair{tool_syntax::hermes, std::string("<tool_call>\n{\"name\": \"get_time\", "
                                                                             "\"arguments\": {}}\n</tool_call>\n<tool_call>\n"
                                                                             "{\"name\": \"get_weather\", \"arguments\": "
                                                                             "{\"city\": \"Oslo\"}}\n</tool_call>")},
                                       std::pair{tool_syntax::json, std::string(R"([{"name": "get_time", "parameters": {}}, )"
                                                                                R"({"name": "get_weather", "parameters": {}}])")}}) {
      tool_call_parser one(syntax, names, "call_", 1);
      tool_call_parser::piece p = one.push(text), rest = one.finish();
      p.calls.insert(p.calls.end(), rest.calls.begin(), rest.calls.end());
      REQUIRE(p.calls.size() == 1);
      CHECK(p.calls[0].name == "get_time");
      CHECK(one.calls() == 1);
      CHECK((p.content + rest.content).find("get_weather") == std::string::npos);  // dropped, not turned into content
    }
    const jinja::chat_template qwen = template_with("<tool_call>");
    CHECK_FALSE(std::get<completion_request>(chat(weather + R"(,"parallel_tool_calls":false)", &qwen)).parallel_tool_calls);
    CHECK(std::get<completion_request>(chat(weather, &qwen)).parallel_tool_calls);
  }

  TEST_CASE("tool calls in the chat shapes: a message with tool_calls, streamed deltas with their index") {
    completion_request r;
    r.kind = endpoint::chat_completions;
    r.call_syntax = tool_syntax::hermes;
    completion_result result;
    result.finish_reason = "tool_calls";
    result.tool_calls = {{"call_a", "get_time", "{}"}};
    const auto body = nlohmann::json::parse(response_body(r, "chatcmpl-1", 0, result));
    const auto& message = body["choices"][0]["message"];
    CHECK(message["content"].is_null());
    CHECK(message["tool_calls"][0]["function"]["name"] == "get_time");
    CHECK(message["tool_calls"][0]["type"] == "function");
    CHECK(body["choices"][0]["finish_reason"] == "tool_calls");
    const std::string chunk = stream_chunk(r, "chatcmpl-1", 0, "", "", false, {}, nullptr, result.tool_calls, 3);
    const auto delta = nlohmann::json::parse(chunk.substr(6))["choices"][0]["delta"];
    CHECK(delta["tool_calls"][0]["index"] == 3);
    CHECK(delta["tool_calls"][0]["id"] == "call_a");
    CHECK_FALSE(delta.contains("content"));
  }
}
