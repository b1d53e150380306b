#pragma once
// Message formatting for gpu/ without a formatting library (the GPU-only build has none):
// text::format("{} blocks ({:.1f} MiB)", n, mib) puts the arguments in place of the braces, in order; a
// brace may carry a precision ({:.Nf} fixed, {:.Ne} scientific, {:.Ng} general); {{ and }} are
// literal braces. text::join(range, ", ") joins a range's elements. Arguments print as std::ostream
// prints them (bools as true/false). Calls are qualified (text::format), which keeps std::format out of
// argument-dependent lookup.

#include <ios>
#include <sstream>
#include <string>
#include <string_view>

namespace illm::gpu::text {

namespace detail {

/// Writes `value` as the spec inside the braces (after the colon) asks.
template <class T>
void write_arg(std::ostringstream& out, std::string_view spec, const T& value) {
  const std::ios_base::fmtflags flags = out.flags();
  const std::streamsize precision = out.precision();
  if (spec.size() >= 3 && spec[0] == '.') {
    out.precision(std::stoi(std::string(spec.substr(1, spec.size() - 2))));
    const char kind = spec.back();
    if (kind == 'f') out << std::fixed;
    if (kind == 'e') out << std::scientific;
  }
  out << value;
  out.flags(flags);
  out.precision(precision);
}

/// Copies pattern text up to the next argument brace (unescaping {{ and }}); returns the spec of that
/// brace and advances `pattern` past it, or returns false at the end.
inline bool next_field(std::ostringstream& out, std::string_view& pattern, std::string_view& spec) {
  while (!pattern.empty()) {
    const char c = pattern.front();
    if ((c == '{' || c == '}') && pattern.size() > 1 && pattern[1] == c) {
      out << c;
      pattern.remove_prefix(2);
      continue;
    }
    if (c == '{') {
      const size_t close = pattern.find('}');
      if (close == std::string_view::npos) break;
      const std::string_view inside = pattern.substr(1, close - 1);
      spec = inside.empty() ? inside : inside.substr(1);  // drop the ':'
      pattern.remove_prefix(close + 1);
      return true;
    }
    out << c;
    pattern.remove_prefix(1);
  }
  out << pattern;
  pattern = {};
  return false;
}

inline void format_rest(std::ostringstream& out, std::string_view pattern) {
  std::string_view spec;
  while (next_field(out, pattern, spec)) out << "{}";  // more braces than arguments: keep them visible
}

template <class T, class... Rest>
void format_rest(std::ostringstream& out, std::string_view pattern, const T& first, const Rest&... rest) {
  std::string_view spec;
  if (!next_field(out, pattern, spec)) return;
  write_arg(out, spec, first);
  format_rest(out, pattern, rest...);
}

}  // namespace detail

/// The pattern with each {} (or {:.Nf}, {:.Ne}, {:.Ng}) replaced by the next argument.
template <class... Args>
std::string format(std::string_view pattern, const Args&... args) {
  std::ostringstream out;
  out << std::boolalpha;
  detail::format_rest(out, pattern, args...);
  return out.str();
}

/// The elements of `items` separated by `separator`.
template <class Range>
std::string join(const Range& items, std::string_view separator) {
  std::ostringstream out;
  bool first = true;
  for (const auto& item : items) {
    if (!first) out << separator;
    out << item;
    first = false;
  }
  return out.str();
}

}  // namespace illm::gpu::text
