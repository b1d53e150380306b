#pragma once
// The head of an HTTP/1.x request (its request line and header fields), parsed strictly: what a client sends
// before its body. Everything here is a pure function of the bytes, so it can be tested and fuzzed alone.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace illm::actors::frontend {

/// A request's line and headers.
struct http_head {
  std::string method;
  std::string path;   ///< the target without its query
  std::string query;  ///< what follows the target's '?' (empty: none)
  bool http10 = false;  ///< HTTP/1.0 (no keep-alive unless asked for)
  std::map<std::string, std::string> headers;  ///< names in lower case; repeated fields joined with ", "
  bool keep_alive = true;      ///< the connection may carry another request after this one
  bool expects_continue = false;  ///< "Expect: 100-continue": the client waits for a 100 before its body
  uint64_t content_length = 0;
};

/// A parsed head, or the status (4xx/5xx) to refuse it with and why.
struct head_parse {
  int status = 0;  ///< 0: `head` is valid
  std::string error;
  http_head head;
};

/// Parses `text`: the request line and header lines, each ended by CRLF, without the empty line that ends the
/// head. Strict where a proxy in front could read the bytes otherwise (request smuggling): a bare CR or LF, a
/// folded (obs-fold) line, a repeated Content-Length or Host, Content-Length with Transfer-Encoding, or an
/// HTTP/1.1 request without Host is a 400; a Transfer-Encoding alone a 501 (request bodies are sent with
/// Content-Length here). A request line longer than `max_request_line` bytes is a 414, more than
/// `max_fields` header fields a 431, an HTTP version other than 1.0 and 1.1 a 505. Connection is read as a
/// list of tokens ("close", "keep-alive").
head_parse parse_request_head(std::string_view text, size_t max_request_line, size_t max_fields = 100);

/// The reason phrase of `status` ("OK", "Not Found", ...).
const char* reason_phrase(int status);

}  // namespace illm::actors::frontend
