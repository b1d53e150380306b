#include "actors/frontend/http_parse.hpp"

#include <algorithm>
#include <cctype>
#include <vector>

namespace illm::actors::frontend {

namespace {

/// A character of an HTTP token (RFC 9110 tchar).
bool is_token_char(unsigned char c) {
  return std::isalnum(c) || std::string_view("!#$%&'*+-.^_`|~").find(char(c)) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return is_token_char(c); });
}

/// A field value's characters: visible ASCII, obs-text, space and tab; no other control character.
bool is_field_value(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); });
}

/// A request target in origin form: "/" then visible characters.
bool is_origin_target(std::string_view s) {
  return !s.empty() && s[0] == '/' &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return c > 0x20 && c < 0x7f; });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return out;
}

/// The lines of `text`, each without its CRLF.
std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  while (!text.empty()) {
    const size_t end = text.find("\r\n");
    lines.push_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 2);
  }
  return lines;
}

/// The comma-separated tokens of a list field, trimmed and in lower case.
std::vector<std::string> tokens_of(std::string_view list) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    const std::string_view item = trim(list.substr(at, comma - at));
    if (!item.empty()) out.push_back(lower(item));
    at = comma + 1;
  }
  return out;
}

head_parse refused(int status, std::string error) {
  head_parse p;
  p.status = status;
  p.error = std::move(error);
  return p;
}

/// Reads "METHOD SP target SP HTTP/1.x" into `head`; a refusal's status, or 0.
head_parse parse_request_line(std::string_view line, size_t max_request_line) {
  if (line.size() > max_request_line) return refused(414, "the request line is too long");
  const size_t first = line.find(' '), second = first == line.npos ? line.npos : line.find(' ', first + 1);
  if (second == line.npos || line.find(' ', second + 1) != line.npos)
    return refused(400, "the request line is not \"METHOD TARGET HTTP/1.1\"");
  const std::string_view method = line.substr(0, first), target = line.substr(first + 1, second - first - 1),
                         version = line.substr(second + 1);
  if (!is_token(method)) return refused(400, "the request method is not a token");
  if (!is_origin_target(target)) return refused(400, "the request target is not a path");
  if (version.substr(0, 5) != "HTTP/") return refused(400, "the request line has no HTTP version");
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return refused(505, "only HTTP/1.0 and HTTP/1.1 are served");
  head_parse p;
  p.head.method = std::string(method);
  const size_t question = target.find('?');
  p.head.path = std::string(target.substr(0, question));
  if (question != std::string_view::npos) p.head.query = std::string(target.substr(question + 1));
  p.head.http10 = version == "HTTP/1.0";
  return p;
}

/// Adds "name: value" to `head`; a refusal, or nothing (status 0).
head_parse add_field(std::string_view line, http_head& head) {
  if (line.front() == ' ' || line.front() == '\t') return refused(400, "folded header lines are not accepted");
  const size_t colon = line.find(':');
  if (colon == line.npos || !is_token(line.substr(0, colon))) return refused(400, "a header line is not \"name: value\"");
  const std::string name = lower(line.substr(0, colon));
  const std::string_view value = trim(line.substr(colon + 1));
  if (!is_field_value(value)) return refused(400, "a header value holds a control character");
  auto [it, added] = head.headers.emplace(name, std::string(value));
  if (!added) {
    if (name == "content-length" || name == "host")
      return refused(400, "the request repeats its " + name + " header");
    it->second += ", ";
    it->second += value;
  }
  return {};
}

/// Sets the body length, keep-alive and Expect of `head` from its fields; a refusal, or nothing.
head_parse read_framing(http_head& head) {
  const auto field = [&](const char* name) -> const std::string* {
    auto it = head.headers.find(name);
    return it == head.headers.end() ? nullptr : &it->second;
  };
  if (field("transfer-encoding"))
    return field("content-length") ? refused(400, "the request has both Content-Length and Transfer-Encoding")
                                   : refused(501, "request bodies must be sent with Content-Length");
  if (const std::string* length = field("content-length")) {
    if (length->empty() || length->size() > 18 ||
        !std::all_of(length->begin(), length->end(), [](unsigned char c) { return std::isdigit(c); }))
      return refused(400, "Content-Length is not a number");
    head.content_length = std::stoull(*length);
  }
  const std::vector<std::string> connection = field("connection") ? tokens_of(*field("connection"))
                                                                 : std::vector<std::string>{};
  const auto has = [&](const char* token) { return std::find(connection.begin(), connection.end(), token) != connection.end(); };
  head.keep_alive = !has("close") && (!head.http10 || has("keep-alive"));
  if (!head.http10 && !field("host")) return refused(400, "an HTTP/1.1 request must name its Host");
  if (const std::string* expect = field("expect")) {
    if (lower(*expect) != "100-continue") return refused(417, "only \"Expect: 100-continue\" is understood");
    head.expects_continue = !head.http10;
  }
  return {};
}

}  // namespace

head_parse parse_request_head(std::string_view text, size_t max_request_line, size_t max_fields) {
  const std::vector<std::string_view> lines = lines_of(text);
  if (lines.empty() || lines[0].empty()) return refused(400, "the request has no request line");
  for (std::string_view line : lines)
    if (line.find_first_of("\r\n") != std::string_view::npos)
      return refused(400, "the request head has a bare CR or LF (lines end with CRLF)");
  if (lines.size() - 1 > max_fields) return refused(431, "the request has too many header fields");
  head_parse p = parse_request_line(lines[0], max_request_line);
  if (p.status) return p;
  for (size_t i = 1; i < lines.size(); ++i) {
    if (lines[i].empty()) return refused(400, "the request head has an empty line inside it");
    if (head_parse f = add_field(lines[i], p.head); f.status) return f;
  }
  if (head_parse f = read_framing(p.head); f.status) return f;
  return p;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Status";
  }
}

}  // namespace illm::actors::frontend
