#include "gpu/tier/tier_moves.hpp"

#include <algorithm>
#include <span>
#include <vector>

#include "gpu/batcher.hpp"
#include "gpu/prefix_cache.hpp"
#include "gpu/tier/kv_tier.hpp"

namespace illm::gpu {

demotion_pass demote_oldest_spare(prefix_cache& cache, const kv_pool& pool, kv_tier& tier, size_t window,
                                  backend* via) {
  demotion_pass pass;
  std::vector<std::byte> bytes(pool.layout().block_bytes());
  for (const spare_entry& e : cache.oldest_spare(window)) {
    if (tier.holds(e.key)) {
      ++pass.held;
      continue;
    }
    if (!pool.copy_spare(e.name, bytes, via)) {
      ++pass.reclaimed;
      continue;
    }
    const tier_block_id id{e.key, e.parent, e.tokens};
    if (tier.demote(id, bytes))
      ++pass.demoted;
    else
      ++pass.refused;
  }
  return pass;
}

int promote_tier_prefix(prefix_cache& cache, kv_pool& pool, kv_tier& tier, const block_key& model_root,
                        uint32_t pool_id, uint32_t instance, sequence& seq, backend* via) {
  if (seq.tokens.empty() || seq.keyed_blocks != seq.table.size() ||
      seq.n_cached != int(seq.table.size()) * kv_block_tokens)
    return 0;  // only a prefix held whole and keyed, as attach_cached_prefix leaves it, is continued
  const block_key root = scoped_root(model_root, seq.cache_scope);
  const size_t computable = (seq.tokens.size() - 1) / kv_block_tokens;  // the last token's block is computed
  std::vector<std::byte> bytes(pool.layout().block_bytes());
  block_key parent = seq.table.empty() ? root : seq.last_key;
  int added = 0;
  for (size_t i = seq.table.size(); i < computable; ++i) {
    const auto mine = std::span<const int32_t>(seq.tokens).subspan(i * kv_block_tokens, kv_block_tokens);
    const block_key key = next_key(parent, mine);
    tier_block_id id;
    if (!tier.holds(key, &id) || id.parent != parent || !std::equal(mine.begin(), mine.end(), id.tokens.begin()))
      break;
    auto block = pool.allocate({seq.id, instance});
    if (!block.is_ok()) break;
    if (tier.promote(key, bytes) != tier_read::ok || !pool.write_block(*block, bytes, via).is_ok() ||
        !cache.offer(key, parent, mine, *block)) {
      (void)pool.release(*block);
      break;
    }
    seq.table.push_back({pool_id, *block});
    seq.last_key = parent = key;
    ++seq.keyed_blocks;
    seq.n_cached += kv_block_tokens;
    added += kv_block_tokens;
  }
  return added;
}

bool tier_read_pays(const tier_stats& stats, uint64_t block_bytes, double assumed_read_rate,
                    double prefill_tokens_per_second) {
  const bool measured = stats.read_blocks >= 8 && stats.read_seconds > 0;
  const double rate = measured ? double(stats.read_bytes) / stats.read_seconds : assumed_read_rate;
  if (rate <= 0 || prefill_tokens_per_second <= 0) return rate > 0;
  return double(block_bytes) / rate < double(kv_block_tokens) / prefill_tokens_per_second;
}

}  // namespace illm::gpu
