#pragma once
// The llama2.c tokenizer.bin: SentencePiece BPE by merge scores, with byte fallback.
// Ids 0, 1, 2 are <unk>, BOS, EOS. Ids 3..258 are the byte-fallback tokens (byte = id - 3); in this
// model's file they are stored as the raw byte (ids 3..130) or as the UTF-8 encoding of U+0080..U+00FF
// (ids 131..258), so their strings repeat real pieces: encoding never looks them up, they only cover
// bytes no piece covers, and decoding one emits the single byte id - 3.

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpu/status.hpp"

namespace illm::gpu {

/// Token ids with a fixed meaning in LLaMA vocabularies.
inline constexpr int32_t token_bos = 1;
inline constexpr int32_t token_eos = 2;

/// Encodes text to token ids and decodes ids to bytes.
class tokenizer {
 public:
  /// Reads a tokenizer.bin holding `vocab_size` pieces; a short, long or malformed file is an error.
  static result<tokenizer> load(const std::string& path, int vocab_size);

  /// Token ids of `text` (a leading space is added, as SentencePiece does); BOS first when asked.
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const;
  /// The bytes of `token` when it follows `prev` (a piece after BOS loses its leading space).
  std::string decode(int32_t prev, int32_t token) const;
  /// The bytes of `tokens`, the first following `prev`.
  std::string decode(std::span<const int32_t> tokens, int32_t prev) const;

  int vocab_size() const { return int(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[id]; }

 private:
  struct string_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  /// Id of a piece, or -1; byte-fallback ids are never returned.
  int32_t lookup(std::string_view piece) const;
  bool is_byte_token(int32_t id) const { return has_byte_tokens_ && id >= 3 && id < 259; }

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int32_t, string_hash, std::equal_to<>> ids_;
  bool has_byte_tokens_ = false;
};

}  // namespace illm::gpu
