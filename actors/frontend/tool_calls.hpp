#pragma once
// Tool calls in a model's output, as its chat template taught it to write them: Qwen's and Hermes'
// <tool_call>{"name": ..., "arguments": {...}}</tool_call> tags, or Llama 3.1's bare JSON
// {"name": ..., "parameters": {...}} (one object, a list of them, or several joined by ';'). The parser splits an
// output into the content a client reads and the calls, as the output streams in; a whole output goes through the
// same parser, so a stream and a whole answer agree. A call must name one of the request's tools and carry an
// object of arguments; anything else stays content.

#include <optional>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace illm::actors::frontend {

/// How a model writes its tool calls.
enum class tool_syntax {
  none,    ///< the output is content only (no tools, or tool_choice none)
  hermes,  ///< <tool_call> tags around {"name", "arguments"} (Qwen 2.5 and 3, Hermes)
  json,    ///< bare JSON {"name", "parameters"} (Llama 3.1 to 3.3)
};

/// The syntax a chat template teaches (by the markers it writes).
tool_syntax tool_syntax_of(const std::string& template_source);

/// One call, as OpenAI's tool_calls list shows it.
struct tool_call {
  std::string id;
  std::string name;
  std::string arguments;  ///< a JSON object's text
};

/// An output's text split into content and calls as it arrives.
class tool_call_parser {
 public:
  /// Calls are named `names`; their ids are `id_prefix` and their index; calls past the first `max_calls` are
  /// dropped (parallel_tool_calls false: one).
  tool_call_parser(tool_syntax syntax, std::vector<std::string> names, std::string id_prefix,
                   size_t max_calls = SIZE_MAX);

  /// What a piece of output released: content to show and calls completed.
  struct piece {
    std::string content;
    std::vector<tool_call> calls;
  };
  /// Adds output text; returns what can be released now (text that may begin a call is held).
  piece push(std::string_view text);
  /// The output ended: everything still held.
  piece finish();
  /// Calls found so far.
  size_t calls() const { return found_; }

 private:
  void push_hermes(piece& out);
  void release_content(piece& out, std::string_view text);
  std::optional<tool_call> call_of(std::string_view json_text) const;
  void add_call(piece& out, tool_call call);

  tool_syntax syntax_;
  std::vector<std::string> names_;
  std::string id_prefix_;
  std::string held_;             // output not yet released
  std::string held_space_;       // content's trailing white space (dropped when it only stands beside calls)
  bool inside_call_ = false;     // hermes: after <tool_call>
  bool json_output_ = false;     // json: the output opened with { or [
  bool decided_ = false;         // json: its first character came
  size_t found_ = 0;
  size_t max_calls_;
};

}  // namespace illm::actors::frontend
