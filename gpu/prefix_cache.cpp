#include "gpu/prefix_cache.hpp"

#include <algorithm>

#include "gpu/batcher.hpp"
#include "gpu/text.hpp"
#include "gpu/weights.hpp"

namespace illm::gpu {
namespace {

/// How many of the chain's first blocks `entries` holds, each checked against its parent key and its own tokens.
template <class Entries>
size_t cached_prefix(const Entries& entries, const block_key& root, std::span<const block_key> keys,
                     std::span<const int32_t> tokens) {
  size_t i = 0;
  for (; i < keys.size(); ++i) {
    auto at = entries.find(keys[i]);
    if (at == entries.end()) break;
    const auto mine = tokens.subspan(i * kv_block_tokens, kv_block_tokens);
    if (at->second.parent != (i == 0 ? root : keys[i - 1]) ||
        !std::equal(mine.begin(), mine.end(), at->second.tokens.begin()))
      break;
  }
  return i;
}

}  // namespace

namespace {

/// The model's part of model_identity: its shape, its matrices' types and a sample of its weights.
std::string weights_identity(const model_weights& weights) {
  const model_config& c = weights.config();
  const block_key sample = root_key(weights.sampled_bytes(), "weights");
  return text::format("dim {} hidden {} layers {} heads {}/{} head {} vocab {} rope {} eps {} bias {} qk_norm {} "
                      "scaling {} {} types [{}] weights {} {} {} {}",
                      c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim(), c.vocab_size,
                      c.rope_theta, c.norm_eps, c.qkv_bias, c.qk_norm, int(c.rope_scaling.scaling),
                      c.rope_scaling.factor, weights.describe_types(), sample.words[0], sample.words[1],
                      sample.words[2], sample.words[3]) +
         (c.has_experts() ? text::format(" experts {}/{} norm {} shared {}", c.n_experts_used, c.n_experts,
                                         c.norm_topk, c.shared_hidden_dim)
                          : std::string());
}

}  // namespace

std::string model_identity(const model_weights& weights, dtype kv_type) {
  return weights_identity(weights) + " kv " + to_string(kv_type);
}

kv_identity kv_identity_of(const model_weights& weights, dtype kv_type) {
  return {root_key(weights_identity(weights), "model"), to_string(kv_type)};
}

prefix_cache::prefix_cache(std::shared_ptr<kv_pool> pool, uint32_t instance)
    : pool_(std::move(pool)), instance_(instance) {}

std::shared_ptr<prefix_cache> prefix_cache::over(std::shared_ptr<kv_pool> pool, uint32_t instance) {
  auto cache = std::make_shared<prefix_cache>(pool, instance);
  std::weak_ptr<prefix_cache> weak = cache;
  pool->set_reclaim_listener(spare_user::prefix_cache, [weak](const std::vector<spare_block>& taken) {
    if (auto c = weak.lock()) c->reclaimed(taken);
  });
  return cache;
}

bool prefix_cache::add_reader(entry& e) {
  if (e.readers > 0) {
    ++e.readers;
  } else {
    const spare_block name{e.block, e.spare_generation};
    if (!pool_->claim_spare(std::span(&name, 1))) return false;
    e.readers = 1;
    ++stats_.read_blocks;
  }
  if (e.readers == 2) ++stats_.shared_blocks;
  return true;
}

void prefix_cache::note_added(const block_key& key) {
  if (changes_.added.size() + changes_.removed.size() >= max_reported_changes) changes_lost_ = true;
  if (!changes_lost_) changes_.added.push_back(key);
}

void prefix_cache::note_removed(const block_key& key) {
  if (changes_.added.size() + changes_.removed.size() >= max_reported_changes) changes_lost_ = true;
  if (!changes_lost_) changes_.removed.push_back(key);
}

void prefix_cache::forget(std::unordered_map<block_key, entry, block_key_hash>::iterator at) {
  note_removed(at->first);
  by_block_.erase(at->second.block);
  entries_.erase(at);
  ++stats_.evicted_blocks;
}

std::vector<uint32_t> prefix_cache::take_prefix(const block_key& root, std::span<const block_key> keys,
                                                std::span<const int32_t> tokens) {
  std::vector<uint32_t> blocks;
  const size_t found = cached_prefix(entries_, root, keys, tokens);
  for (size_t i = 0; i < found; ++i) {
    auto at = entries_.find(keys[i]);
    entry& e = at->second;
    if (!add_reader(e)) {
      forget(at);  // reclaimed by an allocation whose report has not come yet
      break;
    }
    blocks.push_back(e.block);
  }
  return blocks;
}

std::vector<uint32_t> prefix_cache::attach(const block_key& root, std::span<const block_key> keys,
                                           std::span<const int32_t> tokens) {
  std::lock_guard lock(mutex_);
  stats_.queried_tokens += keys.size() * kv_block_tokens;
  std::vector<uint32_t> blocks = take_prefix(root, keys, tokens);
  stats_.hit_tokens += blocks.size() * kv_block_tokens;
  return blocks;
}

std::vector<uint32_t> prefix_cache::attach_for_peer(const block_key& root, std::span<const block_key> keys,
                                                    std::span<const int32_t> tokens) {
  std::lock_guard lock(mutex_);
  std::vector<uint32_t> blocks = take_prefix(root, keys, tokens);
  stats_.peer_read_blocks += blocks.size();
  return blocks;
}

std::vector<uint32_t> prefix_cache::attach_run(const block_key& root, std::span<const block_key> keys,
                                               std::span<const int32_t> tokens) {
  std::lock_guard lock(mutex_);
  return take_prefix(root, keys, tokens);
}

void prefix_cache::note_hits(uint64_t queried, uint64_t local, uint64_t remote) {
  std::lock_guard lock(mutex_);
  stats_.queried_tokens += queried;
  stats_.hit_tokens += local;
  stats_.remote_hit_tokens += remote;
}

size_t prefix_cache::match(const block_key& root, std::span<const block_key> keys,
                           std::span<const int32_t> tokens) const {
  std::lock_guard lock(mutex_);
  return cached_prefix(entries_, root, keys, tokens);
}

size_t prefix_cache::read_prefix_blocks(const block_key& root, std::span<const int32_t> tokens) const {
  std::lock_guard lock(mutex_);
  size_t read = 0;
  block_key key = root;
  // The last token's logits are sampled: its block is computed.
  for (size_t i = 0; tokens.size() > 0 && i < (tokens.size() - 1) / kv_block_tokens; ++i) {
    const auto mine = tokens.subspan(i * kv_block_tokens, kv_block_tokens);
    const block_key parent = key;
    key = next_key(parent, mine);
    auto at = entries_.find(key);
    if (at == entries_.end() || at->second.parent != parent ||
        !std::equal(mine.begin(), mine.end(), at->second.tokens.begin()))
      break;
    if (at->second.readers > 0) ++read;
  }
  return read;
}

bool prefix_cache::offer(const block_key& key, const block_key& parent, std::span<const int32_t> tokens,
                         uint32_t block) {
  std::lock_guard lock(mutex_);
  if (tokens.size() != size_t(kv_block_tokens) || entries_.count(key) || forgotten_.count(block)) return false;
  // An entry naming this block with no reader is stale: the pool reclaimed it and gave it to the offerer. One with
  // readers is the cache's already (a request read it where it lies).
  if (auto named = by_block_.find(block); named != by_block_.end()) {
    auto at = entries_.find(named->second);
    if (at->second.readers > 0) return false;
    forget(at);
  }
  if (!pool_->set_owner(std::span(&block, 1), block_owner{prefix_cache_request, instance_})) return false;
  entry e;
  e.parent = parent;
  std::copy(tokens.begin(), tokens.end(), e.tokens.begin());
  e.block = block;
  e.readers = 1;
  entries_.emplace(key, e);
  by_block_.emplace(block, key);
  note_added(key);
  ++stats_.inserted_blocks;
  ++stats_.read_blocks;
  return true;
}

bool prefix_cache::release(uint32_t block) {
  std::lock_guard lock(mutex_);
  if (auto gone = forgotten_.find(block); gone != forgotten_.end()) {
    if (--gone->second == 0) {
      forgotten_.erase(gone);
      (void)pool_->release(block);
    }
    return true;
  }
  auto key = by_block_.find(block);
  if (key == by_block_.end()) return false;
  entry& e = entries_.at(key->second);
  if (e.readers == 0) return false;  // a stale entry: the block is someone else's now
  if (--e.readers == 1) --stats_.shared_blocks;
  if (e.readers > 0) return true;
  --stats_.read_blocks;
  e.spare_generation = pool_->make_spare(std::span(&block, 1), spare_user::prefix_cache).front().generation;
  return true;
}

void prefix_cache::reclaimed(const std::vector<spare_block>& taken) {
  std::lock_guard lock(mutex_);
  for (const spare_block& s : taken) {
    auto key = by_block_.find(s.block);
    if (key == by_block_.end()) continue;
    auto at = entries_.find(key->second);
    if (at->second.readers == 0 && at->second.spare_generation == s.generation) forget(at);
  }
}

uint32_t prefix_cache::flush() {
  std::lock_guard lock(mutex_);
  uint32_t freed = 0;
  for (auto& [key, e] : entries_) {
    if (e.readers == 0) {
      pool_->release_spare({e.block, e.spare_generation});
      ++freed;
    } else {
      forgotten_[e.block] = e.readers;
    }
    note_removed(key);
    ++stats_.evicted_blocks;
  }
  entries_.clear();
  by_block_.clear();
  stats_.read_blocks = stats_.shared_blocks = 0;
  return freed;
}

std::vector<spare_entry> prefix_cache::oldest_spare(size_t n) const {
  const std::vector<spare_block> names = pool_->oldest_spare(spare_user::prefix_cache, n);
  std::lock_guard lock(mutex_);
  std::vector<spare_entry> out;
  for (const spare_block& s : names) {
    auto key = by_block_.find(s.block);
    if (key == by_block_.end()) continue;
    const entry& e = entries_.at(key->second);
    if (e.readers == 0 && e.spare_generation == s.generation) out.push_back({s, key->second, e.parent, e.tokens});
  }
  return out;
}

uint32_t prefix_cache::readers(uint32_t block) const {
  std::lock_guard lock(mutex_);
  if (auto gone = forgotten_.find(block); gone != forgotten_.end()) return gone->second;
  auto key = by_block_.find(block);
  return key == by_block_.end() ? 0 : entries_.at(key->second).readers;
}

prefix_cache_stats prefix_cache::stats() const {
  std::lock_guard lock(mutex_);
  prefix_cache_stats s = stats_;
  s.cached_blocks = uint32_t(entries_.size());
  return s;
}

prefix_changes prefix_cache::take_changes(bool full) {
  std::lock_guard lock(mutex_);
  prefix_changes out;
  if (full || changes_lost_) {
    out.full = true;
    out.added.reserve(entries_.size());
    for (const auto& [key, e] : entries_) out.added.push_back(key);
  } else {
    out = std::move(changes_);
  }
  changes_ = {};
  changes_lost_ = false;
  return out;
}

std::vector<block_key> chain_keys(const block_key& root, std::span<const int32_t> tokens, size_t blocks) {
  std::vector<block_key> keys(std::min(blocks, tokens.size() / kv_block_tokens));
  block_key key = root;
  for (size_t i = 0; i < keys.size(); ++i)
    keys[i] = key = next_key(key, tokens.subspan(i * kv_block_tokens, kv_block_tokens));
  return keys;
}

int attach_cached_prefix(prefix_cache& cache, const block_key& model_root, uint32_t pool, sequence& seq) {
  if (seq.tokens.empty()) return 0;
  const block_key root = scoped_root(model_root, seq.cache_scope);
  // The last token's logits are sampled: its block is computed.
  const std::vector<block_key> keys = chain_keys(root, seq.tokens, (seq.tokens.size() - 1) / kv_block_tokens);
  const std::vector<uint32_t> found = cache.attach(root, keys, seq.tokens);
  for (uint32_t b : found) seq.table.push_back({pool, b});
  seq.n_cached = int(found.size()) * kv_block_tokens;
  seq.keyed_blocks = uint32_t(found.size());
  seq.last_key = found.empty() ? block_key{} : keys[found.size() - 1];
  return seq.n_cached;
}

void offer_computed_blocks(prefix_cache& cache, const block_key& model_root, uint32_t pool, sequence& seq) {
  const block_key root = scoped_root(model_root, seq.cache_scope);
  while (seq.keyed_blocks < seq.full_blocks() && seq.keyed_blocks < seq.table.size()) {
    const uint32_t i = seq.keyed_blocks;
    const block_key parent = i == 0 ? root : seq.last_key;
    const auto tokens = std::span(seq.tokens).subspan(size_t(i) * kv_block_tokens, kv_block_tokens);
    seq.last_key = next_key(parent, tokens);
    if (seq.table[i].pool == pool) (void)cache.offer(seq.last_key, parent, tokens, seq.table[i].block);
    ++seq.keyed_blocks;
  }
}

std::vector<keyed_block> keyed_blocks_elsewhere(const block_key& model_root, uint32_t pool, const sequence& seq) {
  std::vector<keyed_block> out;
  const auto elsewhere = [pool](const block_ref& ref) { return !ref.absent() && ref.pool != pool; };
  if (std::none_of(seq.table.begin(), seq.table.end(), elsewhere)) return out;
  const block_key root = scoped_root(model_root, seq.cache_scope);
  const std::vector<block_key> keys =
      chain_keys(root, seq.tokens, std::min<size_t>(seq.full_blocks(), seq.table.size()));
  for (uint32_t i = 0; i < keys.size(); ++i) {
    const block_ref& ref = seq.table[i];
    if (!elsewhere(ref)) continue;
    const auto tokens = std::span(seq.tokens).subspan(size_t(i) * kv_block_tokens, kv_block_tokens);
    out.push_back({ref.pool, ref.block, i, keys[i], i ? keys[i - 1] : root, {tokens.begin(), tokens.end()}});
  }
  return out;
}

bool well_keyed(const keyed_block& b) {
  return b.tokens.size() == size_t(kv_block_tokens) && next_key(b.parent, b.tokens) == b.key;
}

}  // namespace illm::gpu
