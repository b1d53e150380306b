#include "gpu/grammar/token_mask.hpp"

#include <algorithm>
#include <utility>

namespace illm::gpu::grammar {

namespace {

/// Closing distances a constraint keeps before it starts over (a schema's outputs visit a bounded set of states; a
/// free text inside a string does not grow it).
constexpr size_t max_cached_distances = 4096;

/// What a cached entry of `key` costs beyond its value: the key twice (map and order) and the nodes.
size_t entry_bytes(const std::string& key) { return 2 * key.size() + 96; }

}  // namespace

token_trie::token_trie(const tokenizer& vocab) : bytes_(size_t(vocab.vocab_size())), nodes_(1) {
  // A token's bytes inside a text: after another token that is not BOS (at a text's start a leading space may be
  // dropped).
  const int32_t before = vocab.bos_id().value_or(-1) == 0 ? 1 : 0;
  for (int32_t id = 0; id < vocab.vocab_size(); ++id) {
    if (vocab.is_special(id)) continue;
    bytes_[size_t(id)] = vocab.decode(before, id);
    const std::string& b = bytes_[size_t(id)];
    if (b.empty()) continue;
    uint32_t at = 0;
    for (char c : b) {
      const auto byte = static_cast<uint8_t>(c);
      auto& children = nodes_[at].children;
      auto it = std::find_if(children.begin(), children.end(), [&](const auto& ch) { return ch.first == byte; });
      if (it != children.end()) {
        at = it->second;
        continue;
      }
      nodes_.emplace_back();
      nodes_[at].children.emplace_back(byte, uint32_t(nodes_.size() - 1));
      at = uint32_t(nodes_.size() - 1);
    }
    nodes_[at].tokens.push_back(id);
  }
}

token_set allowed_tokens(const grammar& g, const match_state& state, const token_trie& trie) {
  token_set allowed(trie.vocab_size());
  std::vector<std::pair<uint32_t, match_state>> pending{{0, state}};
  while (!pending.empty()) {
    auto [at, here] = std::move(pending.back());
    pending.pop_back();
    const byte_set next = next_bytes(g, here);
    for (const auto& [byte, child] : trie.nodes()[at].children) {
      if (!next.test(byte)) continue;
      match_state after = advance(g, here, byte);
      if (after.dead()) continue;
      for (int32_t id : trie.nodes()[child].tokens) allowed.set(id);
      if (!trie.nodes()[child].children.empty()) pending.emplace_back(child, std::move(after));
    }
  }
  return allowed;
}

constraint::constraint(std::shared_ptr<const grammar> g, std::shared_ptr<const token_trie> trie,
                       size_t mask_budget_bytes)
    : grammar_(std::move(g)),
      trie_(std::move(trie)),
      start_(start_state(*grammar_)),
      mask_budget_bytes_(mask_budget_bytes),
      grammar_bytes_(grammar_->bytes()) {}

std::shared_ptr<const token_set> constraint::allowed(const match_state& state) const {
  const std::string key = state.key();
  {
    std::lock_guard lock(mutex_);
    if (auto it = masks_.find(key); it != masks_.end()) {
      ++cached_;
      mask_order_.splice(mask_order_.begin(), mask_order_, it->second.second);
      return it->second.first;
    }
  }
  auto mask = std::make_shared<const token_set>(allowed_tokens(*grammar_, state, *trie_));
  keep(key, mask);
  return mask;
}

void constraint::keep(const std::string& key, std::shared_ptr<const token_set> mask) const {
  std::lock_guard lock(mutex_);
  ++computed_;
  if (masks_.count(key)) return;  // computed meanwhile by another thread
  mask_order_.push_front(key);
  mask_bytes_ += mask->bytes() + entry_bytes(key);
  masks_.emplace(key, mask_entry{std::move(mask), mask_order_.begin()});
  while (mask_bytes_ > mask_budget_bytes_ && masks_.size() > 1) {
    auto oldest = masks_.find(mask_order_.back());
    mask_bytes_ -= oldest->second.first->bytes() + entry_bytes(oldest->first);
    masks_.erase(oldest);
    mask_order_.pop_back();
  }
}

bool constraint::accept(match_state& state, int32_t token) const {
  if (token < 0 || token >= trie_->vocab_size() || trie_->bytes(token).empty()) {
    state.stacks.clear();
    return false;
  }
  return advance(*grammar_, state, trie_->bytes(token));
}

std::optional<int> constraint::closing_distance(const match_state& state) const {
  const std::string key = state.key();
  {
    std::lock_guard lock(mutex_);
    if (auto it = distances_.find(key); it != distances_.end()) return it->second;
  }
  const std::optional<int> d = ::illm::gpu::grammar::closing_distance(*grammar_, state);
  std::lock_guard lock(mutex_);
  if (distances_.size() >= max_cached_distances) {
    distances_.clear();
    distance_bytes_ = 0;
  }
  if (distances_.emplace(key, d).second) distance_bytes_ += entry_bytes(key);
  return d;
}

std::vector<int32_t> constraint::closer_tokens(const match_state& state) const {
  const std::optional<int> d = closing_distance(state);
  if (!d || *d == 0) return {};
  byte_set closer;  // first bytes on a shortest way to the end
  const byte_set next = next_bytes(*grammar_, state);
  for (size_t b = 0; b < 256; ++b) {
    if (!next.test(b)) continue;
    const std::optional<int> after = closing_distance(advance(*grammar_, state, uint8_t(b)));
    if (after && *after < *d) closer.set(b);
  }
  const auto allowed_now = allowed(state);
  std::vector<int32_t> out;
  allowed_now->for_each([&](int32_t id) {
    const std::string& bytes = trie_->bytes(id);
    if (bytes.empty() || !closer.test(static_cast<uint8_t>(bytes[0]))) return;
    match_state after = state;
    if (!accept(after, id)) return;
    const std::optional<int> left = closing_distance(after);
    if (left && *left < *d) out.push_back(id);
  });
  return out;
}

uint64_t constraint::computed() const {
  std::lock_guard lock(mutex_);
  return computed_;
}

uint64_t constraint::cached() const {
  std::lock_guard lock(mutex_);
  return cached_;
}

size_t constraint::bytes() const {
  std::lock_guard lock(mutex_);
  return sizeof(*this) + grammar_bytes_ + mask_bytes_ + distance_bytes_;
}

}  // namespace illm::gpu::grammar
