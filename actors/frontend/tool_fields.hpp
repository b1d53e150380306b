#pragma once
// The tool fields of a chat completion request: tools (functions with JSON-schema parameters) and tool_choice
// (none, auto, required, or a named function), checked against the model's chat template; the assistant turns'
// tool_calls and the tool turns of a conversation, made ready for the template.

#include <optional>

#include <nlohmann/json.hpp>

#include "actors/frontend/openai_api.hpp"

namespace illm::jinja {
class chat_template;
}

namespace illm::actors::frontend {

/// Reads tools and tool_choice into `r`: the names and syntax its output's calls are parsed by, and for required or a
/// named function the constraint that makes the output one call (in the syntax the template teaches). A 400 names
/// the field: tools on a model without a chat template, or with one that takes none, a malformed tool, a
/// tool_choice naming no tool, more tools than the limit.
std::optional<api_error> read_tools(const nlohmann::ordered_json& body, const jinja::chat_template* chat,
                                    const api_limits& limits, completion_request& r);

/// The messages as a template reads them: each assistant tool call's arguments as an object (clients send them as
/// JSON text, nested at most `max_json_depth` deep; templates write them with tojson). A 400 names a malformed call.
std::optional<api_error> prepare_tool_turns(nlohmann::ordered_json& messages, int max_json_depth);

}  // namespace illm::actors::frontend
