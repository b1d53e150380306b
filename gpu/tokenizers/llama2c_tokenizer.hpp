#pragma once
// SentencePiece BPE by merge scores, with byte fallback: the llama2.c tokenizer.bin, and a GGUF file's "llama"
// vocabulary with its token types. Ids 0, 1, 2 are <unk>, BOS, EOS. In a tokenizer.bin, ids 3..258 are the
// byte-fallback tokens (byte = id - 3); in this model's file they are stored as the raw byte (ids 3..130) or as the
// UTF-8 encoding of U+0080..U+00FF (ids 131..258), so their strings repeat real pieces: encoding never looks them
// up, they only cover bytes no piece covers, and decoding one emits the single byte id - 3. A GGUF vocabulary says
// each token's type instead (llama.cpp's: normal, unknown, control, user-defined, unused, byte): its byte tokens
// (<0xXX>) are the fallback wherever they lie, control and user-defined tokens are matched whole in the text (as
// llama.cpp and Hugging Face's tokenizers match special and added tokens), unknown and unused ones never, and its
// add_space_prefix says whether a text (and each run of text after a special token) gets SentencePiece's leading
// space.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpu/status.hpp"
#include "gpu/tokenizer.hpp"

namespace illm::gpu {

/// GGUF's token types (tokenizer.ggml.token_type).
enum class spm_token_type : uint8_t { undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5,
                                      byte = 6 };

/// What a SentencePiece vocabulary says beyond its pieces and scores (a GGUF file's; a tokenizer.bin has neither).
struct spm_options {
  /// Per id (empty: llama2.c's layout, byte tokens at 3..258, every other piece normal).
  std::vector<spm_token_type> types;
  bool add_space_prefix = true;  ///< a text starts with a space (SentencePiece's dummy prefix)
};

/// A SentencePiece vocabulary: BOS 1, EOS 2.
class llama2c_tokenizer final : public tokenizer {
 public:
  /// Reads a tokenizer.bin holding `vocab_size` pieces; a short, long or malformed file is an error.
  static result<llama2c_tokenizer> load(const std::string& path, int vocab_size);
  /// The vocabulary of `pieces` (spaces as spaces, not U+2581) and their merge scores, in id order (a GGUF file's
  /// SentencePiece vocabulary).
  static llama2c_tokenizer from_pieces(std::vector<std::string> pieces, std::vector<float> scores,
                                       spm_options options = {});

  /// Token ids of `text` (a leading space is added, as SentencePiece does); BOS first when asked.
  std::vector<int32_t> encode(std::string_view text, bool add_bos) const override;
  /// The bytes of `token` when it follows `prev` (a piece after BOS loses its leading space).
  std::string decode(int32_t prev, int32_t token) const override;
  using tokenizer::decode;

  int vocab_size() const override { return int(pieces_.size()); }
  bool is_special(int32_t id) const override;
  std::optional<int32_t> bos_id() const override { return token_bos; }
  std::vector<int32_t> end_ids() const override { return {token_eos}; }
  const std::string& piece(int32_t id) const { return pieces_[id]; }

 private:
  struct string_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  /// Id of a piece the merges may make, or -1 (byte, control, user-defined, unknown and unused ids never).
  int32_t lookup(std::string_view piece) const;
  /// The byte a byte-fallback token stands for, or -1.
  int byte_of(int32_t id) const { return id >= 0 && size_t(id) < byte_of_.size() ? byte_of_[size_t(id)] : -1; }
  /// Appends the ids of `text` (no special token in it) merged by score.
  void encode_run(std::string_view text, std::vector<int32_t>& out) const;

  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int32_t, string_hash, std::equal_to<>> ids_;
  std::array<int32_t, 256> byte_ids_{};  // byte -> its fallback token (-1: none, then <unk>)
  std::vector<int16_t> byte_of_;         // id -> the byte it stands for (-1: none)
  std::vector<std::pair<std::string, int32_t>> whole_;  // control and user-defined tokens, longest first
  std::vector<bool> special_;            // control tokens (BOS and EOS in a tokenizer.bin)
  bool add_space_prefix_ = true;
};

}  // namespace illm::gpu
