#pragma once
// The Unicode a tokenizer.json needs, from libraries that know it: regular expressions with \p{L}/\p{N} classes
// (PCRE2, in UTF mode with Unicode properties) and normalization forms (ICU); and the byte-level alphabet of
// GPT-2-style vocabularies (each byte shown as one printable character).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpu/status.hpp"

namespace illm::gpu {

/// A compiled regular expression (the Oniguruma-style patterns of tokenizer.json; PCRE2 reads them alike).
class unicode_regex {
 public:
  /// Compiles `pattern`; invalid_argument naming the pattern and where it fails.
  static result<unicode_regex> compile(const std::string& pattern);
  /// Byte ranges [begin, end) of the successive non-overlapping matches in `text` (invalid UTF-8 is matched
  /// around, never read as characters); an error when matching stops short of the end (PCRE2's match, depth or
  /// JIT stack limit), never a shorter list.
  result<std::vector<std::pair<size_t, size_t>>> matches(std::string_view text) const;

 private:
  struct code_deleter {
    void operator()(void* code) const;
  };
  std::shared_ptr<void> code_;  // pcre2_code_8, shared by copies (matching allocates its own data)
};

/// Unicode normalization forms.
enum class normal_form : uint8_t { nfc, nfd, nfkc, nfkd };

/// `text` in normal form `form` (text that is not UTF-8 is returned as it is).
std::string normalize(std::string_view text, normal_form form);

/// The byte-level alphabet: the character that stands for `byte` (printable bytes stand for themselves, the
/// others for U+0100 on), as UTF-8.
const std::string& byte_as_char(uint8_t byte);
/// The byte a byte-level character stands for; -1 for a character outside the alphabet.
int char_as_byte(char32_t c);

/// Appends the UTF-8 encoding of `c`.
void append_utf8(std::string& out, char32_t c);
/// The code point at `text[i]` and its length in bytes (an invalid byte: its own value, length 1).
std::pair<char32_t, size_t> next_utf8(std::string_view text, size_t i);
/// `text` with each invalid UTF-8 sequence replaced by U+FFFD, as a lossy decoding does.
std::string valid_utf8(std::string_view text);

}  // namespace illm::gpu
