#pragma once
// The BPE model of a tokenizer.json: a vocabulary of pieces, merges ranked by their order, and what a piece the
// vocabulary lacks becomes (byte-fallback tokens <0xAB>, or the unknown token, fused or not). A word is split
// into characters and the adjacent pair of lowest rank merged until none is left, lowest position first among
// equal ranks, as Hugging Face's tokenizers do.

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "gpu/status.hpp"

namespace illm::gpu {

/// A BPE vocabulary and its merges.
class bpe_model {
 public:
  /// How a piece the vocabulary lacks is encoded.
  struct options {
    bool byte_fallback = false;        ///< as its bytes' tokens <0x00>..<0xFF>
    std::optional<int32_t> unk_id;     ///< else as the unknown token (none: dropped)
    bool fuse_unk = false;             ///< consecutive unknown pieces as one unknown token
    bool ignore_merges = false;        ///< a word the vocabulary holds whole is that token, unmerged
    std::string continuing_prefix;     ///< prefixed to every piece but a word's first
  };

  /// `merges` as pairs of pieces, in rank order; corrupt_model naming a merge whose pieces or result the
  /// vocabulary lacks (`where` names the file in messages).
  static result<bpe_model> create(std::unordered_map<std::string, int32_t> vocab,
                                  const std::vector<std::pair<std::string, std::string>>& merges, options opts,
                                  const std::string& where);

  /// Appends the tokens of `word`.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  /// The id of `piece`, or -1.
  int32_t id_of(std::string_view piece) const;

 private:
  struct merge {
    int32_t rank;
    int32_t result;
  };
  struct string_hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  static uint64_t pair_key(int32_t a, int32_t b) { return uint64_t(uint32_t(a)) << 32 | uint32_t(b); }
  /// The word's first symbols: its characters as pieces, byte-fallback or unknown where the vocabulary lacks one.
  std::vector<int32_t> initial_symbols(std::string_view word) const;
  /// Merges `symbols` in place, lowest rank first.
  void merge_all(std::vector<int32_t>& symbols) const;

  std::unordered_map<std::string, int32_t, string_hash, std::equal_to<>> vocab_;
  std::unordered_map<uint64_t, merge> merges_;
  options options_;
  std::array<int32_t, 256> byte_ids_{};  // <0xAB> per byte, -1 where absent
  bool all_bytes_ = false;               // every byte has a token
};

}  // namespace illm::gpu
