#include "gpu/jinja/lexer.hpp"

#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace illm::jinja {

void fail(int line, const std::string& what) {
  throw template_error("template line " + std::to_string(line) + ": " + what, error_kind::syntax);
}

namespace {

bool is_blank(char c) { return c == ' ' || c == '\t'; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

/// Where the tag that opens at `at` (of kind "{{", "{%" or "{#") closes, and its closing marker's length.
size_t tag_end(const std::string& s, size_t at, char close, int line) {
  bool in_string = false;
  char quote = 0;
  for (size_t i = at + 2; i + 1 < s.size(); ++i) {
    const char c = s[i];
    if (close != '#' && in_string) {
      if (c == '\\') ++i;
      else if (c == quote) in_string = false;
      continue;
    }
    if (close != '#' && (c == '\'' || c == '"')) {
      in_string = true;
      quote = c;
      continue;
    }
    if (c == close && s[i + 1] == '}') return i;
  }
  fail(line, std::string("a tag opened here is never closed by '") + close + "}'");
}

value number_value(const std::string& digits, bool is_float, int line) {
  errno = 0;
  char* end = nullptr;
  const value v = is_float ? value(json(std::strtod(digits.c_str(), &end))) : value(json(int64_t(std::strtoll(digits.c_str(), &end, 10))));
  if (errno == ERANGE) fail(line, "the number " + digits + " is out of range");
  return v;
}

}  // namespace

std::vector<segment> cut(const std::string& s) {
  std::vector<segment> out;
  size_t at = 0;
  int line = 1;
  auto count_lines = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) line += s[i] == '\n';
  };
  while (at < s.size()) {
    size_t open = s.find('{', at);
    while (open != std::string::npos && open + 1 < s.size() && s[open + 1] != '{' && s[open + 1] != '%' && s[open + 1] != '#')
      open = s.find('{', open + 1);
    if (open == std::string::npos || open + 1 >= s.size()) {
      out.push_back({segment::text, s.substr(at), line});
      break;
    }
    if (open > at) out.push_back({segment::text, s.substr(at, open - at), line});
    count_lines(at, open);
    const char kind = s[open + 1];
    const char close = kind == '{' ? '}' : kind;
    const size_t end = tag_end(s, open, close, line);
    std::string body = s.substr(open + 2, end - open - 2);
    segment seg{kind == '{' ? segment::output : segment::statement, "", line};
    if (!body.empty() && (body.front() == '-' || body.front() == '+')) {
      seg.strip_before = body.front() == '-';
      seg.keep_indent = body.front() == '+';
      body.erase(0, 1);
    }
    if (!body.empty() && body.back() == '-') {
      seg.strip_after = true;
      body.pop_back();
    }
    seg.body = kind == '#' ? "" : body;
    if (kind == '#') seg.what = segment::statement;  // a comment: an empty statement, trimmed as a block tag
    count_lines(open, end + 2);
    at = end + 2;
    out.push_back(std::move(seg));
    // {% raw %} ... {% endraw %}: the text between, as it is.
    if (kind == '%' && body.find_first_not_of(" \t\n") != std::string::npos &&
        body.substr(body.find_first_not_of(" \t\n"), 3) == "raw") {
      const size_t close_raw = s.find("endraw", at);
      const size_t tag = close_raw == std::string::npos ? close_raw : s.rfind("{%", close_raw);
      if (tag == std::string::npos) fail(line, "{% raw %} without {% endraw %}");
      out.back().body = "";
      out.push_back({segment::text, s.substr(at, tag - at), line});
      count_lines(at, tag);
      const size_t end_raw = tag_end(s, tag, '%', line);
      at = end_raw + 2;
    }
  }
  return out;
}

/// Applies Jinja2's whitespace rules (as transformers sets it: trim_blocks, lstrip_blocks) to the text segments.
void trim(std::vector<segment>& segs) {
  // Whether a tag starts its line is a question about the source, asked before any text is trimmed.
  std::vector<std::string> source;
  for (const segment& s : segs) source.push_back(s.what == segment::text ? s.body : "");
  const auto starts_line = [&](size_t text_index) {
    const std::string& before = source[text_index];
    size_t k = before.size();
    while (k > 0 && is_blank(before[k - 1])) --k;
    return k == 0 ? text_index == 0 : before[k - 1] == '\n';
  };
  for (size_t i = 0; i < segs.size(); ++i) {
    if (segs[i].what == segment::text) continue;
    const bool block = segs[i].what == segment::statement;
    if (i > 0 && segs[i - 1].what == segment::text) {
      std::string& before = segs[i - 1].body;
      if (segs[i].strip_before) {
        while (!before.empty() && is_space(before.back())) before.pop_back();
      } else if (block && !segs[i].keep_indent && starts_line(i - 1)) {  // lstrip_blocks
        while (!before.empty() && is_blank(before.back())) before.pop_back();
      }
    }
    if (i + 1 < segs.size() && segs[i + 1].what == segment::text) {
      std::string& after = segs[i + 1].body;
      if (segs[i].strip_after) {
        size_t k = 0;
        while (k < after.size() && is_space(after[k])) ++k;
        after.erase(0, k);
      } else if (block && !after.empty() && after[0] == '\n') {  // trim_blocks
        after.erase(0, 1);
      } else if (block && after.size() >= 2 && after[0] == '\r' && after[1] == '\n') {
        after.erase(0, 2);
      }
    }
  }
}

std::vector<token> tokenize(const std::string& s, int line) {
  std::vector<token> out;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (is_space(c)) {
      ++i;
    } else if (std::isalpha(uint8_t(c)) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(uint8_t(s[j])) || s[j] == '_')) ++j;
      out.push_back({token::name, s.substr(i, j - i), {}});
      i = j;
    } else if (std::isdigit(uint8_t(c))) {
      size_t j = i;
      bool is_float = false;
      while (j < s.size() && (std::isdigit(uint8_t(s[j])) || s[j] == '_' ||
                              (s[j] == '.' && !is_float && j + 1 < s.size() && std::isdigit(uint8_t(s[j + 1]))))) {
        is_float = is_float || s[j] == '.';
        ++j;
      }
      std::string digits;
      for (size_t k = i; k < j; ++k)
        if (s[k] != '_') digits += s[k];
      out.push_back({token::number, digits, number_value(digits, is_float, line)});
      i = j;
    } else if (c == '\'' || c == '"') {
      std::string text;
      size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          text += s[j];
          continue;
        }
        const char e = s[++j];
        text += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e == '0' ? '\0' : e;
      }
      if (j >= s.size()) fail(line, "a string is never closed");
      out.push_back({token::string, text, {}});
      i = j + 1;
    } else {
      static const char* two[] = {"==", "!=", "<=", ">=", "//", "**"};
      std::string op(1, c);
      for (const char* t : two)
        if (s.compare(i, 2, t) == 0) op = t;
      if (std::string("()[]{}.,:|+-*/%~<>=!").find(c) == std::string::npos) fail(line, std::string("unexpected '") + c + "'");
      out.push_back({token::op, op, {}});
      i += op.size();
    }
  }
  out.push_back({token::end, "", {}});
  return out;
}

}  // namespace illm::jinja
