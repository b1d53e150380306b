#pragma once
// The tokens a grammar allows next: the vocabulary's tokens in a trie of their bytes, walked from a matcher state
// (a branch is left at its first byte the grammar refuses), and a constraint that keeps the masks of the states it
// has seen (a JSON string's inside, a value's start: states recur from token to token and across requests), one bit
// per token, the least recently used dropped past a budget of bytes.

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpu/grammar/grammar.hpp"
#include "gpu/tokenizer.hpp"

namespace illm::gpu::grammar {

/// The vocabulary's tokens by their bytes.
class token_trie {
 public:
  /// The tokens of `vocab` as their bytes read inside a text; special tokens are left out (no grammar reads them).
  explicit token_trie(const tokenizer& vocab);
  int vocab_size() const { return int(bytes_.size()); }
  /// The bytes of `token` (empty for a special token).
  const std::string& bytes(int32_t token) const { return bytes_[size_t(token)]; }

  struct node {
    std::vector<std::pair<uint8_t, uint32_t>> children;  ///< (byte, node)
    std::vector<int32_t> tokens;                         ///< the tokens whose bytes end here
  };
  const std::vector<node>& nodes() const { return nodes_; }

 private:
  std::vector<std::string> bytes_;
  std::vector<node> nodes_;
};

/// A set of token ids, one bit each.
class token_set {
 public:
  explicit token_set(int vocab_size = 0) : words_((size_t(vocab_size) + 63) / 64), size_(vocab_size) {}
  int size() const { return size_; }
  bool test(int32_t id) const { return id >= 0 && id < size_ && (words_[size_t(id) >> 6] >> (id & 63)) & 1; }
  void set(int32_t id) { words_[size_t(id) >> 6] |= uint64_t(1) << (id & 63); }
  /// Calls f(id) for each token in the set, in order (a word of 64 at a time: empty words cost one test).
  template <class F>
  void for_each(F f) const {
    for (size_t w = 0; w < words_.size(); ++w)
      for (uint64_t bits = words_[w]; bits; bits &= bits - 1) f(int32_t(w * 64 + size_t(__builtin_ctzll(bits))));
  }
  /// Calls f(id) for each token of [0, size()) not in the set, in order (full words cost one test).
  template <class F>
  void for_each_excluded(F f) const {
    for (size_t w = 0; w < words_.size(); ++w) {
      uint64_t missing = ~words_[w];
      if (w + 1 == words_.size() && size_ % 64) missing &= (uint64_t(1) << (size_ % 64)) - 1;
      for (; missing; missing &= missing - 1) f(int32_t(w * 64 + size_t(__builtin_ctzll(missing))));
    }
  }
  /// The bytes it holds.
  size_t bytes() const { return words_.size() * sizeof(uint64_t) + sizeof(*this); }

 private:
  std::vector<uint64_t> words_;
  int size_;
};

/// The tokens whose bytes `g` can read from `state`.
token_set allowed_tokens(const grammar& g, const match_state& state, const token_trie& trie);

/// A grammar over a vocabulary, shared by the requests that ask for it: their states, the masks (cached per
/// state, within `mask_budget_bytes`) and the tokens' steps.
class constraint {
 public:
  constraint(std::shared_ptr<const grammar> g, std::shared_ptr<const token_trie> trie,
             size_t mask_budget_bytes = size_t(32) << 20);
  /// Where an output starts.
  match_state start() const { return start_; }
  /// The tokens allowed from `state` (cached; thread-safe).
  std::shared_ptr<const token_set> allowed(const match_state& state) const;
  /// Reads `token`'s bytes from `state`; false (and dead) when the grammar refuses them.
  bool accept(match_state& state, int32_t token) const;
  /// The fewest bytes from `state` to a whole output (cached; nullopt: too far to tell).
  std::optional<int> closing_distance(const match_state& state) const;
  /// The tokens allowed from `state` that bring it strictly closer to a whole output (none when it is whole or
  /// too far to tell): what an output whose budget runs out may take.
  std::vector<int32_t> closer_tokens(const match_state& state) const;
  const grammar& rules() const { return *grammar_; }
  /// Masks computed and masks found cached, so far.
  uint64_t computed() const;
  uint64_t cached() const;
  /// The bytes it holds: its grammar, its cached masks and distances.
  size_t bytes() const;

 private:
  /// Keeps `mask` for `key`, dropping the least recently used masks past the budget.
  void keep(const std::string& key, std::shared_ptr<const token_set> mask) const;

  std::shared_ptr<const grammar> grammar_;
  std::shared_ptr<const token_trie> trie_;
  match_state start_;
  size_t mask_budget_bytes_;
  size_t grammar_bytes_;
  mutable std::mutex mutex_;
  using mask_entry = std::pair<std::shared_ptr<const token_set>, std::list<std::string>::iterator>;
  mutable std::list<std::string> mask_order_;  // most recently used first
  mutable std::unordered_map<std::string, mask_entry> masks_;
  mutable size_t mask_bytes_ = 0;
  mutable std::unordered_map<std::string, std::optional<int>> distances_;
  mutable size_t distance_bytes_ = 0;
  mutable uint64_t computed_ = 0, cached_ = 0;
};

}  // namespace illm::gpu::grammar
