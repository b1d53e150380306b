#include "gpu/tokenizers/unicode_text.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include <array>

#include "gpu/text.hpp"

namespace illm::gpu {

void unicode_regex::code_deleter::operator()(void* code) const { pcre2_code_free(static_cast<pcre2_code*>(code)); }

result<unicode_regex> unicode_regex::compile(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
  if (!code) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error, message.data(), message.size());
    return status{status_code::invalid_argument, text::format("regex {}: {} at offset {}", pattern,
                                                              reinterpret_cast<const char*>(message.data()), offset)};
  }
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // faster where JIT is available; plain matching otherwise
  unicode_regex r;
  r.code_ = std::shared_ptr<void>(code, code_deleter{});
  return r;
}

result<std::vector<std::pair<size_t, size_t>>> unicode_regex::matches(std::string_view text) const {
  auto* code = static_cast<pcre2_code*>(code_.get());
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> data(pcre2_match_data_create_from_pattern(code, nullptr),
                                                                      pcre2_match_data_free);
  std::vector<std::pair<size_t, size_t>> out;
  size_t at = 0;
  while (at <= text.size()) {
    const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), at, 0, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      std::array<PCRE2_UCHAR, 256> message{};
      pcre2_get_error_message(rc, message.data(), message.size());
      return status{status_code::invalid_argument,
                    text::format("the text cannot be split by the tokenizer's pre-tokenizer at byte {}: {}", at,
                                 reinterpret_cast<const char*>(message.data()))};
    }
    const PCRE2_SIZE* v = pcre2_get_ovector_pointer(data.get());
    if (v[1] == v[0]) {  // an empty match: step over one character
      at = v[1] + (v[1] < text.size() ? next_utf8(text, v[1]).second : 1);
      continue;
    }
    out.emplace_back(v[0], v[1]);
    at = v[1];
  }
  return out;
}

std::string normalize(std::string_view text, normal_form form) {
  bool ascii = true;
  for (char c : text) ascii = ascii && uint8_t(c) < 0x80;
  if (ascii) return std::string(text);  // every form leaves ASCII as it is
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* n = form == normal_form::nfc    ? unorm2_getNFCInstance(&err)
                          : form == normal_form::nfd  ? unorm2_getNFDInstance(&err)
                          : form == normal_form::nfkc ? unorm2_getNFKCInstance(&err)
                                                      : unorm2_getNFKDInstance(&err);
  std::u16string wide(text.size() + 1, u'\0');
  int32_t wide_length = 0;
  u_strFromUTF8(wide.data(), int32_t(wide.size()), &wide_length, text.data(), int32_t(text.size()), &err);
  if (U_FAILURE(err)) return std::string(text);
  std::u16string normal(size_t(wide_length) * 4 + 16, u'\0');
  const int32_t normal_length = unorm2_normalize(n, wide.data(), wide_length, normal.data(), int32_t(normal.size()), &err);
  if (U_FAILURE(err)) return std::string(text);
  std::string out(size_t(normal_length) * 3 + 1, '\0');
  int32_t out_length = 0;
  u_strToUTF8(out.data(), int32_t(out.size()), &out_length, normal.data(), normal_length, &err);
  if (U_FAILURE(err)) return std::string(text);
  out.resize(size_t(out_length));
  return out;
}

namespace {

/// GPT-2's byte alphabet: printable Latin-1 bytes stand for themselves, the rest for U+0100 onwards in order.
struct byte_alphabet {
  std::array<std::string, 256> chars;
  std::array<int, 512> bytes{};
  byte_alphabet() {
    bytes.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const char32_t c = printable ? char32_t(b) : next++;
      append_utf8(chars[size_t(b)], c);
      bytes[size_t(c)] = b;
    }
  }
};

const byte_alphabet& alphabet() {
  static const byte_alphabet a;
  return a;
}

}  // namespace

const std::string& byte_as_char(uint8_t byte) { return alphabet().chars[byte]; }

int char_as_byte(char32_t c) { return c < 512 ? alphabet().bytes[size_t(c)] : -1; }

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
}

std::pair<char32_t, size_t> next_utf8(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return uint8_t(s[k]); };
  const uint8_t b = byte(i);
  const size_t length = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
  if (length == 0 || i + length > s.size()) return {b, 1};
  char32_t c = length == 1 ? b : length == 2 ? (b & 0x1F) : length == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return {b, 1};
    c = (c << 6) | (byte(i + k) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not characters.
  const char32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < least[length] || (c >= 0xD800 && c <= 0xDFFF) || c > 0x10FFFF) return {b, 1};
  return {c, length};
}

std::string valid_utf8(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    auto [c, length] = next_utf8(text, i);
    if (length > 1 || uint8_t(text[i]) < 0x80) {
      out.append(text.substr(i, length));
      i += length;
      continue;
    }
    // One replacement for a lead byte and the continuation bytes that follow it (a cut-off character).
    const uint8_t lead = uint8_t(text[i]);
    const size_t expected = (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 1;
    size_t taken = 1;
    while (taken < expected && i + taken < text.size() && (uint8_t(text[i + taken]) & 0xC0) == 0x80) ++taken;
    out += "\xEF\xBF\xBD";
    i += taken;
  }
  return out;
}

}  // namespace illm::gpu
