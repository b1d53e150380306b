#include "actors/frontend/tool_fields.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "actors/frontend/sampling_fields.hpp"
#include "actors/frontend/tool_calls.hpp"
#include "gpu/grammar/constraint_cache.hpp"
#include "gpu/jinja/chat_template.hpp"

namespace illm::actors::frontend {

namespace {

using ordered_json = nlohmann::ordered_json;

bool valid_name(const std::string& name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
}

/// A tool's parameters schema ({"type": "object", "properties": {}} when it gives none).
ordered_json parameters_of(const ordered_json& tool) {
  const ordered_json& f = tool.at("function");
  if (f.contains("parameters") && !f.at("parameters").is_null()) return f.at("parameters");
  return ordered_json{{"type", "object"}, {"properties", ordered_json::object()}};
}

std::optional<api_error> check_tool(const ordered_json& tool, size_t i, const api_limits& limits) {
  const std::string where = fmt::format("tools[{}]", i);
  if (!tool.is_object() || tool.value("type", ordered_json()) != "function" || !tool.contains("function") ||
      !tool.at("function").is_object())
    return bad_field(where + " must be {\"type\": \"function\", \"function\": {\"name\": ...}}", "tools");
  const ordered_json& f = tool.at("function");
  if (!f.contains("name") || !f.at("name").is_string() || !valid_name(f.at("name").get<std::string>()))
    return bad_field(where + ".function.name must be 1 to 64 letters, digits, '_' or '-'", "tools");
  if (f.contains("description") && !f.at("description").is_null() && !f.at("description").is_string())
    return bad_field(where + ".function.description must be a string", "tools");
  if (f.contains("parameters") && !f.at("parameters").is_null() && !f.at("parameters").is_object())
    return bad_field(where + ".function.parameters must be a JSON schema object", "tools");
  if (f.contains("strict") && !f.at("strict").is_null() && !f.at("strict").is_boolean())
    return bad_field(where + ".function.strict must be a boolean", "tools");
  if (parameters_of(tool).dump().size() > limits.max_schema_bytes)
    return bad_field(fmt::format("{}.function.parameters is larger than {} bytes", where, limits.max_schema_bytes),
                     "tools");
  return std::nullopt;
}

/// The JSON of one call to `tool`, in `syntax`'s keys.
ordered_json call_schema(const ordered_json& tool, tool_syntax syntax) {
  const char* arguments = syntax == tool_syntax::hermes ? "arguments" : "parameters";
  return ordered_json{
      {"type", "object"},
      {"properties", {{"name", {{"const", tool.at("function").at("name")}}}, {arguments, parameters_of(tool)}}},
      {"required", {"name", arguments}},
      {"additionalProperties", false}};
}

/// The constraint spec of one call to one of `tools`, wrapped as `syntax` wraps a call.
std::string one_call_spec(const std::vector<ordered_json>& tools, tool_syntax syntax) {
  ordered_json schema;
  if (tools.size() == 1) {
    schema = call_schema(tools[0], syntax);
  } else {
    schema = ordered_json{{"anyOf", ordered_json::array()}};
    for (const ordered_json& t : tools) schema["anyOf"].push_back(call_schema(t, syntax));
  }
  const bool tags = syntax == tool_syntax::hermes;
  const ordered_json parts = {{"before", tags ? "<tool_call>\n" : ""},
                              {"schema", schema},
                              {"after", tags ? "\n</tool_call>" : ""},
                              {"strict", true}};
  return gpu::grammar::wrapped_schema_spec_prefix + parts.dump();
}

/// tool_choice: "none", "auto", "required" or {"type": "function", "function": {"name": ...}} -> the choice, with
/// the named tool in `named`.
std::optional<api_error> read_choice(const ordered_json& body, const std::vector<ordered_json>& tools,
                                     std::string& choice, const ordered_json*& named) {
  choice = tools.empty() ? "none" : "auto";
  if (!body.contains("tool_choice") || body.at("tool_choice").is_null()) return std::nullopt;
  const ordered_json& c = body.at("tool_choice");
  if (c.is_string() && (c == "none" || c == "auto" || c == "required")) {
    choice = c.get<std::string>();
  } else if (c.is_object() && c.value("type", ordered_json()) == "function" && c.contains("function") &&
             c.at("function").is_object() && c.at("function").contains("name") &&
             c.at("function").at("name").is_string()) {
    const std::string name = c.at("function").at("name").get<std::string>();
    auto it =
        std::find_if(tools.begin(), tools.end(), [&](const ordered_json& t) { return t["function"]["name"] == name; });
    if (it == tools.end())
      return bad_field(fmt::format("tool_choice names '{}', which tools do not define", name), "tool_choice");
    choice = "function";
    named = &*it;
  } else {
    return bad_field("tool_choice must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
                     "{\"name\": ...}}",
                     "tool_choice");
  }
  if (choice != "none" && tools.empty())
    return bad_field("tool_choice " + choice + " needs tools", "tool_choice");
  return std::nullopt;
}

}  // namespace

std::optional<api_error> read_tools(const ordered_json& body, const jinja::chat_template* chat,
                                    const api_limits& limits, completion_request& r) {
  std::vector<ordered_json> tools;
  if (body.contains("tools") && !body.at("tools").is_null()) {
    const ordered_json& t = body.at("tools");
    if (!t.is_array()) return bad_field("'tools' must be a list", "tools");
    if (int(t.size()) > limits.max_tools) return bad_field(fmt::format("at most {} tools", limits.max_tools), "tools");
    for (size_t i = 0; i < t.size(); ++i) {
      if (auto e = check_tool(t[i], i, limits)) return e;
      tools.push_back(t[i]);
    }
  }
  if (!tools.empty() && !chat)
    return bad_field("tools need the model's chat template, and this model has none (give one with --chat-template)",
                     "tools");
  if (!tools.empty() && chat->source().find("tools") == std::string::npos)
    return bad_field("this model's chat template does not take tools", "tools");
  std::string choice;
  const ordered_json* named = nullptr;
  if (auto e = read_choice(body, tools, choice, named)) return e;
  if (choice == "none") return std::nullopt;
  r.call_syntax = tool_syntax_of(chat->source());
  if (body.contains("parallel_tool_calls") && body.at("parallel_tool_calls").is_boolean())
    r.parallel_tool_calls = body.at("parallel_tool_calls").get<bool>();
  for (const ordered_json& t : tools) r.tool_names.push_back(t["function"]["name"].get<std::string>());
  if (choice == "auto") return std::nullopt;
  if (!r.constraint.empty())
    return bad_field("response_format cannot be combined with tool_choice " + choice, "tool_choice");
  r.constraint = one_call_spec(named ? std::vector<ordered_json>{*named} : tools, r.call_syntax);
  r.tool_call_required = true;
  return std::nullopt;
}

std::optional<api_error> prepare_tool_turns(ordered_json& messages, int max_json_depth) {
  for (ordered_json& msg : messages) {
    if (!msg.contains("tool_calls") || msg.at("tool_calls").is_null()) continue;
    if (msg.value("role", ordered_json()) != "assistant")
      return bad_field("only assistant messages carry tool_calls", "messages");
    ordered_json& calls = msg["tool_calls"];
    if (!calls.is_array()) return bad_field("an assistant message's tool_calls must be a list", "messages");
    for (ordered_json& call : calls) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object() ||
          !call["function"].contains("name") || !call["function"]["name"].is_string())
        return bad_field("each tool call needs function.name and function.arguments", "messages");
      ordered_json& arguments = call["function"]["arguments"];
      if (arguments.is_string())
        arguments = gpu::parse_bounded_or_discarded<ordered_json>(arguments.get<std::string>(), max_json_depth);
      if (!arguments.is_object())
        return bad_field(fmt::format("the arguments of the call to '{}' are not a JSON object nested at most {} "
                                     "levels deep (max_json_depth)",
                                     call["function"]["name"].get<std::string>(), max_json_depth),
                         "messages");
    }
  }
  return std::nullopt;
}

}  // namespace illm::actors::frontend
