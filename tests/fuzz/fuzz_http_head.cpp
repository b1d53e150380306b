// The head of an HTTP request as any client on the network can send it: parsed, or refused with a 4xx/5xx; a
// parsed head has a method, a path, lower-case header names and a length that fits the number sent.
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "actors/frontend/http_parse.hpp"

using namespace illm::actors::frontend;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const head_parse p = parse_request_head(text, 8192);
  if (p.status != 0) {
    if (p.status < 400 || p.status > 505 || p.error.empty()) std::abort();
    return 0;
  }
  const http_head& h = p.head;
  if (h.method.empty() || h.path.empty() || h.path[0] != '/' || h.content_length > 999999999999999999ull) std::abort();
  for (const auto& [name, value] : h.headers)
    for (char c : name)
      if (std::isupper(static_cast<unsigned char>(c))) std::abort();
  return 0;
}
