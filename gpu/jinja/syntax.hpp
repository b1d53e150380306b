#pragma once
// The Jinja engine's syntax tree and its reader: the lexer's segments (lexer.hpp) read into statements, and each
// tag's expression parsed by precedence as Jinja2 parses it.

#include <memory>
#include <string>
#include <vector>

#include "gpu/jinja/value.hpp"

namespace illm::jinja {

/// A node of the tree: an expression or a statement.
struct node {
  enum class kind {
    // expressions
    literal, name, attribute, item, slice, call, filter, test, unary, binary, conditional, list, dict,
    // statements
    text, output, block, if_, for_, set, set_block, filter_block, macro, break_, continue_
  };
  kind what;
  int line = 0;
  std::string text;  ///< name, attribute, filter, test, operator; text of a text node; set's target name
  value constant;    ///< literal
  std::vector<std::unique_ptr<node>> kids;  ///< operands, items, arguments, bodies (by kind, see syntax.cpp)
  std::vector<std::string> names;           ///< keyword names of call/filter/test arguments (parallel to the last
                                            ///< kids), for targets, macro parameters, set's attribute
  bool negated = false;                     ///< test: "is not"
  size_t positional = 0;                    ///< call/filter/test: arguments before the keyword ones
};

/// Reads a whole template into a block node; template_error naming the line of what it cannot read.
std::unique_ptr<node> read_template(const std::string& source);

}  // namespace illm::jinja
