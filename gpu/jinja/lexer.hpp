#pragma once
// The Jinja engine's lexer: a template's text cut into text, {{ output }}, {% statements %} and {# comments #}
// with Jinja2's whitespace rules (trim_blocks and lstrip_blocks, as transformers sets them, and the "-" and "+"
// markers), and a tag's inside cut into tokens (names, numbers, strings, operators) for the parser (syntax.cpp).

#include <string>
#include <vector>

#include "gpu/jinja/value.hpp"

namespace illm::jinja {

/// A template_error naming the template's line.
[[noreturn]] void fail(int line, const std::string& what);

/// A piece of the template: text, or a tag's inside.
struct segment {
  enum kind { text, output, statement } what;
  std::string body;
  int line;
  bool strip_before = false, strip_after = false;  ///< "-" markers of a tag
  bool keep_indent = false;                        ///< "+" of a block tag: no lstrip_blocks
};

/// The template `s` cut into segments (comments dropped, {% raw %} blocks as text); a template_error naming the
/// line of a tag that is never closed.
std::vector<segment> cut(const std::string& s);

/// Applies Jinja2's whitespace rules (as transformers sets it: trim_blocks, lstrip_blocks) to the text segments.
void trim(std::vector<segment>& segs);

/// A token of a tag.
struct token {
  enum kind { name, number, string, op, end } what;
  std::string text;
  value number_value;
};

/// The tokens of a tag's inside `s` (at template line `line`), an end token last.
std::vector<token> tokenize(const std::string& s, int line);

}  // namespace illm::jinja
