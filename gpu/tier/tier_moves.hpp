#pragma once
// Blocks between a pool and the tier below it (gpu/tier/kv_tier.hpp).
//
// Demotion: the prefix cache's oldest spare blocks (cached, read by no request, next to be reclaimed by the pool)
// copied into the tier before the pool hands them to someone else. Replicas are never demoted (they are second
// copies of blocks that live elsewhere). A block reclaimed while it was being copied is dropped and counted (its
// copy may be torn); a tier whose write queue is full drops the rest (counted by the tier).
//
// Promotion: a prompt's prefix continued past what its pool's prefix cache holds with the blocks the tier holds,
// each read back into a block of the pool (checked on the way: a block that fails is dropped and computed) and
// handed to the cache as computed blocks are, the request its first reader. Whether that beats computing the
// tokens is the caller's choice (tier_read_pays).

#include <cstddef>
#include <cstdint>

#include "gpu/block_key.hpp"

namespace illm::gpu {

class backend;
class kv_pool;
class kv_tier;
class prefix_cache;
struct sequence;
struct tier_stats;

/// What one demotion pass did.
struct demotion_pass {
  uint32_t demoted = 0;    ///< blocks queued to the tier
  uint32_t held = 0;       ///< blocks the tier held already
  uint32_t reclaimed = 0;  ///< blocks reclaimed while being copied: dropped
  uint32_t refused = 0;    ///< blocks the tier did not take (being written already, or its queue full)
};

/// Writes down the oldest `window` spare blocks of `cache` (a cache over `pool`) that `tier` lacks, reading the
/// pool with `via` as kv_pool::checksum does.
demotion_pass demote_oldest_spare(prefix_cache& cache, const kv_pool& pool, kv_tier& tier, size_t window,
                                  backend* via = nullptr);

/// Continues the prefix `seq` holds (what attach_cached_prefix gave it from `cache`, over `pool`, pool id `pool_id`
/// of instance `instance`) with the blocks `tier` holds, each read into a block allocated for it (written with
/// `via` as kv_pool::write_block does) and offered to `cache`. Stops at the first block the tier lacks or fails,
/// or when the pool has no free block; the last token's block is always left to compute. Returns the tokens added.
int promote_tier_prefix(prefix_cache& cache, kv_pool& pool, kv_tier& tier, const block_key& model_root,
                        uint32_t pool_id, uint32_t instance, sequence& seq, backend* via = nullptr);

/// Whether reading a block of `block_bytes` from a tier costs less than computing its kv_block_tokens tokens at
/// `prefill_tokens_per_second`: at the tier's measured read rate once it has read 8 blocks, before that at
/// `assumed_read_rate` (bytes a second: the medium's nominal rate).
bool tier_read_pays(const tier_stats& stats, uint64_t block_bytes, double assumed_read_rate,
                    double prefill_tokens_per_second);

}  // namespace illm::gpu
