#include "gpu/tokenizers/bpe_model.hpp"

#include <cstdio>
#include <queue>

#include "gpu/text.hpp"
#include "gpu/tokenizers/unicode_text.hpp"

namespace illm::gpu {

result<bpe_model> bpe_model::create(std::unordered_map<std::string, int32_t> vocab,
                                    const std::vector<std::pair<std::string, std::string>>& merges, options opts,
                                    const std::string& where) {
  bpe_model m;
  m.options_ = std::move(opts);
  for (auto& [piece, id] : vocab) m.vocab_.emplace(piece, id);
  const size_t prefix = m.options_.continuing_prefix.size();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    const std::string joined = a + (b.compare(0, prefix, m.options_.continuing_prefix) == 0 ? b.substr(prefix) : b);
    const int32_t ia = m.id_of(a), ib = m.id_of(b), ij = m.id_of(joined);
    if (ia < 0 || ib < 0 || ij < 0)
      return status{status_code::corrupt_model,
                    text::format("{}: merge {} ('{}' '{}'): the vocabulary lacks '{}'", where, rank, a, b,
                                 ia < 0 ? a : ib < 0 ? b : joined)};
    m.merges_.try_emplace(pair_key(ia, ib), merge{int32_t(rank), ij});  // the first rank of a pair wins
  }
  m.all_bytes_ = true;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    m.byte_ids_[size_t(b)] = m.id_of(name);
    m.all_bytes_ = m.all_bytes_ && m.byte_ids_[size_t(b)] >= 0;
  }
  return m;
}

int32_t bpe_model::id_of(std::string_view piece) const {
  const auto it = vocab_.find(piece);
  return it == vocab_.end() ? -1 : it->second;
}

std::vector<int32_t> bpe_model::initial_symbols(std::string_view word) const {
  std::vector<int32_t> symbols;
  std::optional<int32_t> pending_unk;  // an unknown token not yet added (it may fuse with the next)
  for (size_t i = 0; i < word.size();) {
    const size_t length = next_utf8(word, i).second;
    const std::string_view ch = word.substr(i, length);
    const int32_t id = i == 0 || options_.continuing_prefix.empty() ? id_of(ch)
                                                                      : id_of(options_.continuing_prefix + std::string(ch));
    i += length;
    if (id >= 0) {
      if (pending_unk) symbols.push_back(*std::exchange(pending_unk, std::nullopt));
      symbols.push_back(id);
      continue;
    }
    if (options_.byte_fallback) {
      bool covered = true;
      for (char c : ch) covered = covered && byte_ids_[uint8_t(c)] >= 0;
      if (covered) {
        if (pending_unk) symbols.push_back(*std::exchange(pending_unk, std::nullopt));
        for (char c : ch) symbols.push_back(byte_ids_[uint8_t(c)]);
        continue;
      }
    }
    if (!options_.unk_id) continue;
    if (pending_unk && !options_.fuse_unk) symbols.push_back(*pending_unk);
    pending_unk = options_.unk_id;
  }
  if (pending_unk) symbols.push_back(*pending_unk);
  return symbols;
}

void bpe_model::merge_all(std::vector<int32_t>& symbols) const {
  if (symbols.size() < 2) return;
  // A doubly linked list of symbols and a heap of candidate merges (rank, left position), checked when popped.
  const size_t count = symbols.size();
  const int n = int(count);
  std::vector<int> prev(count), next(count);
  for (int i = 0; i < n; ++i) {
    prev[size_t(i)] = i - 1;
    next[size_t(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct candidate {
    int32_t rank;
    int pos;
    int32_t left, right;  // the symbols the merge was found for
    bool operator>(const candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<candidate, std::vector<candidate>, std::greater<>> heap;
  const auto consider = [&](int pos) {
    if (pos < 0 || next[size_t(pos)] < 0) return;
    const int32_t l = symbols[size_t(pos)], r = symbols[size_t(next[size_t(pos)])];
    if (auto it = merges_.find(pair_key(l, r)); it != merges_.end()) heap.push({it->second.rank, pos, l, r});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  std::vector<bool> gone(count, false);
  while (!heap.empty()) {
    const candidate c = heap.top();
    heap.pop();
    const int right = next[size_t(c.pos)];
    if (gone[size_t(c.pos)] || right < 0 || symbols[size_t(c.pos)] != c.left || symbols[size_t(right)] != c.right)
      continue;  // stale: one of its symbols changed since
    symbols[size_t(c.pos)] = merges_.at(pair_key(c.left, c.right)).result;
    gone[size_t(right)] = true;
    next[size_t(c.pos)] = next[size_t(right)];
    if (next[size_t(right)] >= 0) prev[size_t(next[size_t(right)])] = c.pos;
    consider(prev[size_t(c.pos)]);
    consider(c.pos);
  }
  std::vector<int32_t> merged;
  for (int i = 0; i >= 0; i = next[size_t(i)]) merged.push_back(symbols[size_t(i)]);
  symbols = std::move(merged);
}

void bpe_model::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges)
    if (const int32_t id = id_of(word); id >= 0) {
      out.push_back(id);
      return;
    }
  std::vector<int32_t> symbols = initial_symbols(word);
  merge_all(symbols);
  out.insert(out.end(), symbols.begin(), symbols.end());
}

}  // namespace illm::gpu
