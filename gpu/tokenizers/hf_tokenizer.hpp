#pragma once
// Hugging Face's tokenizer.json, as its tokenizers library runs it: added and special tokens matched in the text
// first (leftmost, longest), the rest normalized (NFC and the other forms, Prepend, Replace, Lowercase, Sequence),
// pre-tokenized (Split by a Unicode regex, ByteLevel, Metaspace, Digits, Sequence) and encoded by the BPE model;
// the post-processor's special tokens around the text (TemplateProcessing's BOS); the decoders (ByteLevel,
// Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence) back to bytes. tokenizer_config.json beside it names
// BOS and EOS. A component or option it does not implement is refused when the file is read, naming it.

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "gpu/status.hpp"
#include "gpu/tokenizer.hpp"

namespace illm::gpu {

/// A vocabulary read from tokenizer.json.
class hf_tokenizer final : public tokenizer {
 public:
  /// Reads `path` (a tokenizer.json, or a folder holding one and perhaps tokenizer_config.json); a vocabulary
  /// with ids at or past `model_vocab` (when positive) is refused.
  static result<std::shared_ptr<const hf_tokenizer>> load(const std::string& path, int model_vocab = 0);
  /// The tokenizer a tokenizer.json's content describes (`origin` names it in errors).
  static result<std::shared_ptr<hf_tokenizer>> from_json(const nlohmann::json& j, const std::string& origin,
                                                         int model_vocab = 0);
  /// Sets BOS (when given) and the end ids, as a GGUF file's metadata names them.
  void set_specials(std::optional<int32_t> bos, std::vector<int32_t> eos);
  ~hf_tokenizer() override;

  std::vector<int32_t> encode(std::string_view text, bool add_special) const override;
  result<std::vector<int32_t>> try_encode(std::string_view text, bool add_special) const override;
  std::string decode(int32_t prev, int32_t token) const override;
  using tokenizer::decode;
  /// The text of `ids` as Hugging Face's decode gives it (invalid UTF-8 replaced by U+FFFD), special tokens
  /// written out unless skipped.
  std::string decode_text(std::span<const int32_t> ids, bool skip_special) const override;

  int vocab_size() const override;
  bool is_special(int32_t id) const override;
  std::optional<int32_t> bos_id() const override;
  std::vector<int32_t> end_ids() const override;
  /// The id of a token's text (a piece of the vocabulary or an added token), or -1.
  int32_t id_of(std::string_view piece) const;

  struct parts;  ///< the components read from the file

 private:
  hf_tokenizer() = default;
  std::unique_ptr<parts> parts_;
};

}  // namespace illm::gpu
