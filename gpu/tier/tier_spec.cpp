#include "gpu/tier/tier_spec.hpp"

#include <cctype>

namespace illm::gpu {

namespace {

status bad_size(std::string_view text, const char* why) {
  return {status_code::invalid_argument, "size '" + std::string(text) + "': " + why};
}

/// The multiplier a suffix names (K, M, G, T with an optional "iB" or "B"; empty: bytes), or 0.
uint64_t suffix_multiplier(std::string_view suffix) {
  if (suffix.empty()) return 1;
  const char unit = char(std::toupper(static_cast<unsigned char>(suffix[0])));
  const std::string_view rest = suffix.substr(1);
  if (!(rest.empty() || rest == "B" || rest == "iB")) return 0;
  switch (unit) {
    case 'K': return uint64_t(1) << 10;
    case 'M': return uint64_t(1) << 20;
    case 'G': return uint64_t(1) << 30;
    case 'T': return uint64_t(1) << 40;
    default: return 0;
  }
}

}  // namespace

std::string tier_spec::text() const {
  return kind == tier_kind::host ? "host:" + std::to_string(bytes) : "disk:" + path + ":" + std::to_string(bytes);
}

result<uint64_t> parse_byte_size(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0) return bad_size(text, "a whole number of bytes, or one with K, M, G or T after it");
  if (digits > 16) return bad_size(text, "too large");
  uint64_t number = 0;
  for (size_t i = 0; i < digits; ++i) number = number * 10 + uint64_t(text[i] - '0');
  const uint64_t unit = suffix_multiplier(text.substr(digits));
  if (unit == 0) return bad_size(text, "the unit is one of K, M, G, T (KiB, MiB, GiB, TiB), or none for bytes");
  if (number > max_tier_bytes / unit) return bad_size(text, "more than 1 PiB");
  return number * unit;
}

result<tier_spec> parse_tier_spec(std::string_view text) {
  const std::string what = "--kv-tier '" + std::string(text) + "': ";
  const size_t kind_end = text.find(':');
  const size_t last = text.rfind(':');
  if (kind_end == std::string_view::npos)
    return status{status_code::invalid_argument, what + "expected host:SIZE or disk:PATH:SIZE"};
  tier_spec spec;
  const std::string_view kind = text.substr(0, kind_end);
  if (kind == "host") {
    if (last != kind_end) return status{status_code::invalid_argument, what + "host:SIZE takes no path"};
    spec.kind = tier_kind::host;
  } else if (kind == "disk") {
    if (last == kind_end || last == kind_end + 1)
      return status{status_code::invalid_argument, what + "disk:PATH:SIZE needs a path"};
    spec.kind = tier_kind::disk;
    spec.path = std::string(text.substr(kind_end + 1, last - kind_end - 1));
    if (spec.path.find('\0') != std::string::npos)
      return status{status_code::invalid_argument, what + "the path holds a NUL byte"};
  } else {
    return status{status_code::invalid_argument, what + "the tier is host or disk, not '" + std::string(kind) + "'"};
  }
  auto bytes = parse_byte_size(text.substr(last + 1));
  if (!bytes.is_ok()) return status{status_code::invalid_argument, what + bytes.error().message()};
  if (*bytes < min_tier_bytes) return status{status_code::invalid_argument, what + "a tier holds at least 1 MiB"};
  spec.bytes = *bytes;
  return spec;
}

}  // namespace illm::gpu
