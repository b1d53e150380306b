#pragma once
// The llama2.c tokenizer.bin: SentencePiece BPE by merge scores, with byte fallback.
// Ids 0, 1, 2 are <unk>, BOS, EOS. Ids 3..258 are the byte-fallback tokens (byte = id - 3); in this
// model's file they are stored as the raw byte (ids 3..130) or as the UTF-8 encoding of U+0080..U+00FF
// (ids 131..258), so their strings repeat real pieces: encoding never looks them up, they only cover
// bytes no piece covers, and decoding one emits the single byte id - 3.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpu/status.hpp"
#include "gpu/tokenizer.hpp"

namespace illm::gpu {

/// The llama2.c vocabulary: BOS 1, EOS 2.
class llama2c_tokenizer final : public tokenizer {
 public:
  /// Reads a tokenizer.bin holding `vocab_size` pieces; a short, long or malformed file is an error.
  static result<llama2c_tokenizer> load(const std::string& path, int vocab_size);
  /// The vocabulary of `pieces` (spaces as spaces, not U+2581) and their merge scores, in id order (a GGUF file's
  /// SentencePiece vocabulary).
  static llama2c_tokenizer from_pieces(std::vector<std::string> pieces, std::vector<float> scores);

  /// Token ids of `text` (a leading space is added, as SentencePiece does); BOS first when asked.
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const override;
  /// The bytes of `token` when it follows `prev` (a piece after BOS loses its leading space).
  std::string decode(int32_t prev, int32_t token) const override;
  using tokenizer::decode;

  int vocab_size() const override { return int(pieces_.size()); }
  bool is_special(int32_t id) const override { return id == token_bos || id == token_eos; }
  std::optional<int32_t> bos_id() const override { return token_bos; }
  std::vector<int32_t> end_ids() const override { return {token_eos}; }
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
