#pragma once
// What the runtime asks of a model's vocabulary: text to token ids and ids back to bytes, whatever the format
// (llama2.c's tokenizer.bin: tokenizers/llama2c_tokenizer.hpp; Hugging Face's tokenizer.json:
// tokenizers/hf_tokenizer.hpp).

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/status.hpp"

namespace illm::gpu {

/// BOS and EOS of llama2.c vocabularies (and of the synthetic models the benchmarks run).
inline constexpr int32_t token_bos = 1;
inline constexpr int32_t token_eos = 2;

/// Encodes text to token ids and decodes ids to bytes. Thread-safe once loaded.
class tokenizer {
 public:
  virtual ~tokenizer() = default;
  /// Token ids of `text`; with `add_special`, the ids the vocabulary adds around a text (BOS). Empty when the text
  /// cannot be tokenized (try_encode says why).
  virtual std::vector<int32_t> encode(std::string_view text, bool add_special) const = 0;
  /// encode, or why `text` cannot be tokenized (a pre-tokenizer's regular expression that reached its match or
  /// stack limit on it): what a request's text goes through, so that such a text fails its request instead of
  /// being tokenized some other way.
  virtual result<std::vector<int32_t>> try_encode(std::string_view text, bool add_special) const {
    return encode(text, add_special);
  }
  /// The bytes of `token` when it follows `prev` (-1: the first token of a text). Bytes, not characters: a
  /// character may span tokens.
  virtual std::string decode(int32_t prev, int32_t token) const = 0;
  /// The bytes of `tokens`, the first following `prev`.
  std::string decode(std::span<const int32_t> tokens, int32_t prev) const {
    std::string out;
    for (int32_t t : tokens) {
      out += decode(prev, t);
      prev = t;
    }
    return out;
  }
  /// The text of `ids` as a whole (what /detokenize answers): special tokens written out unless skipped.
  virtual std::string decode_text(std::span<const int32_t> ids, bool skip_special) const {
    std::string out;
    int32_t prev = -1;
    for (int32_t id : ids) {
      if (!(skip_special && is_special(id))) out += decode(prev, id);
      prev = id;
    }
    return out;
  }
  virtual int vocab_size() const = 0;
  /// Whether `id` is a special token (BOS, EOS, chat markers): control, not text.
  virtual bool is_special(int32_t id) const = 0;
  /// The id a text starts with, when the vocabulary has one.
  virtual std::optional<int32_t> bos_id() const = 0;
  /// The ids that end a generation, by the vocabulary's own account.
  virtual std::vector<int32_t> end_ids() const = 0;
};

}  // namespace illm::gpu
