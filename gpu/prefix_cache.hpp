#pragma once
// The prefix cache of one pool: full KV blocks kept by content key, so a request whose prompt starts with a
// prefix computed before reads those blocks instead of computing them again.
//
// A request offers each full block it computed; the cache takes it (the pool's owner of the block becomes
// prefix_cache_request) unless that key is cached already. Readers are counted: the offering request is the
// first, every request that attaches the block one more. When the last reader lets go, the block is made
// spare: it keeps its contents and counts as free, and the pool reclaims spare blocks oldest first when it
// runs out, so cached blocks nobody reads are free memory, evicted least recently used, and only when
// memory is needed. A hit is checked against the block's own tokens and parent key, never the key alone.
// Thread-safe: an instance's engine, manager and the pool's reclaiming allocators share it.

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpu/block_key.hpp"
#include "gpu/kv_pool.hpp"

namespace illm::gpu {

class model_weights;

/// What names a model in its keys' root: its shape, its matrices' types, a sample of its weights' bytes and the
/// KV type.
std::string model_identity(const model_weights& weights, dtype kv_type);

/// The identity of a pool's KV computed by `weights` in `kv_type` (what joins, moves, replicas and prefix reads
/// carry and check).
kv_identity kv_identity_of(const model_weights& weights, dtype kv_type);

/// The pool owner's request id of blocks the prefix cache holds (their readers are requests).
inline constexpr uint64_t prefix_cache_request = ~uint64_t(0);

/// What a prefix cache holds and has done.
struct prefix_cache_stats {
  uint64_t queried_tokens = 0;  ///< prompt tokens of full blocks looked up
  uint64_t hit_tokens = 0;      ///< of those, found
  uint64_t inserted_blocks = 0;
  uint64_t evicted_blocks = 0;  ///< reclaimed by the pool or flushed
  uint32_t cached_blocks = 0;   ///< blocks held now
  uint32_t read_blocks = 0;     ///< of those, read by at least one request now
  uint32_t shared_blocks = 0;   ///< of those, read by two requests or more now
  uint64_t remote_hit_tokens = 0;  ///< prompt tokens this pool's requests found in other pools' caches
  uint64_t peer_read_blocks = 0;   ///< blocks of this cache that other pools' requests attached
};

/// A cached block no request reads, by its name in the pool and what names it in the cache.
struct spare_entry {
  spare_block name;
  block_key key, parent;
  std::array<int32_t, kv_block_tokens> tokens{};
};

/// What a cache gained and lost since its last report (what a cluster-wide index learns), or, when `full`, every
/// key it holds: a report after one was lost, or to an index that starts empty.
struct prefix_changes {
  bool full = false;
  std::vector<block_key> added, removed;
};

/// The prefix cache of one pool.
class prefix_cache {
 public:
  /// A cache over `pool`, whose blocks it takes as block_owner{prefix_cache_request, instance}.
  prefix_cache(std::shared_ptr<kv_pool> pool, uint32_t instance);
  /// A cache over `pool` that the pool tells of the cached blocks it reclaims (its listener for them).
  static std::shared_ptr<prefix_cache> over(std::shared_ptr<kv_pool> pool, uint32_t instance);

  /// The longest cached prefix of a chain: keys[i] names full block i of `tokens` (its first keys.size() * 16
  /// tokens), root is the chain's start. Returns the blocks found, each with one more reader; their tokens are
  /// counted as queried and hit (all of keys' tokens as queried).
  std::vector<uint32_t> attach(const block_key& root, std::span<const block_key> keys, std::span<const int32_t> tokens);
  /// The same for a request of another pool that reads the blocks where they are (counted as read by peers, not as
  /// this pool's queries); `root` is the key before keys[0] (the chain's root, or the block before a run).
  std::vector<uint32_t> attach_for_peer(const block_key& root, std::span<const block_key> keys,
                                        std::span<const int32_t> tokens);
  /// The same for a request of this pool whose prefix lies in pieces here and elsewhere (counted by note_hits).
  std::vector<uint32_t> attach_run(const block_key& root, std::span<const block_key> keys,
                                   std::span<const int32_t> tokens);
  /// Counts a request of this pool whose prefix was found in pieces, here and in other pools' caches: `queried`
  /// prompt tokens of full blocks looked up, of which `local` were found here and `remote` elsewhere.
  void note_hits(uint64_t queried, uint64_t local, uint64_t remote);
  /// How many of the chain's first blocks attach() would find now, without taking them (what a router weighs).
  size_t match(const block_key& root, std::span<const block_key> keys, std::span<const int32_t> tokens) const;
  /// How many of the first cached blocks of `tokens`' chain from `root` requests read now: attach() would give them
  /// without taking memory (the others it finds are spare: free memory it would take). Keys are made one block at
  /// a time, up to the first block not cached (what an admission check weighs, often).
  size_t read_prefix_blocks(const block_key& root, std::span<const int32_t> tokens) const;
  /// Offers used block `block` holding `tokens` (16) as the full block `key` whose parent is `parent`: the cache
  /// takes it, with its offerer as its first reader, unless that key is cached already (false: it stays the
  /// offerer's).
  bool offer(const block_key& key, const block_key& parent, std::span<const int32_t> tokens, uint32_t block);
  /// A reader lets go of `block`: true when the block is the cache's (its last reader makes it spare), false when
  /// it is not (the caller frees it).
  bool release(uint32_t block);
  /// The pool reclaimed these spare blocks of the cache: their entries are forgotten.
  void reclaimed(const std::vector<spare_block>& taken);
  /// Empties the cache (an operator's reset): frees every cached block no request reads, and forgets the others,
  /// which are freed when their last reader ends. Returns the blocks freed now.
  uint32_t flush();
  /// The oldest `n` cached blocks no request reads (the next ones the pool reclaims), oldest first: what a tier
  /// below the pool writes down before they are gone.
  std::vector<spare_entry> oldest_spare(size_t n) const;
  /// Requests reading `block` when the cache holds it (0 when it does not: the block is one request's own).
  uint32_t readers(uint32_t block) const;
  prefix_cache_stats stats() const;
  /// The keys added and removed since the last call (every key held, full, when `full` or when more changed than
  /// a report carries), and starts the next report.
  prefix_changes take_changes(bool full = false);

 private:
  struct entry {
    block_key parent;
    std::array<int32_t, kv_block_tokens> tokens{};
    uint32_t block = 0;
    uint32_t readers = 0;
    uint64_t spare_generation = 0;  ///< with no readers: the name the pool gave it when it was made spare
  };
  /// Takes one more reader of `e` (claiming it back when spare); false when the pool reclaimed it meanwhile.
  bool add_reader(entry& e);
  void forget(std::unordered_map<block_key, entry, block_key_hash>::iterator at);
  /// Takes the longest cached prefix of a chain, one more reader each (the lock held).
  std::vector<uint32_t> take_prefix(const block_key& root, std::span<const block_key> keys,
                                    std::span<const int32_t> tokens);
  void note_added(const block_key& key);
  void note_removed(const block_key& key);

  mutable std::mutex mutex_;
  std::shared_ptr<kv_pool> pool_;
  uint32_t instance_;
  std::unordered_map<block_key, entry, block_key_hash> entries_;
  std::unordered_map<uint32_t, block_key> by_block_;
  std::unordered_map<uint32_t, uint32_t> forgotten_;  ///< blocks a flush forgot while requests read them -> readers
  prefix_cache_stats stats_;
  prefix_changes changes_;     ///< since the last report
  bool changes_lost_ = false;  ///< more changed than a report carries: the next one is full
};

/// The most keys a report of changes carries; past it the next report lists every key instead.
inline constexpr size_t max_reported_changes = 1 << 16;

struct sequence;

/// The keys of the first `blocks` full blocks of `tokens`, chained from `root`.
std::vector<block_key> chain_keys(const block_key& root, std::span<const int32_t> tokens, size_t blocks);

/// Gives `seq` (holding no KV) the longest prefix of its tokens that `cache`, the cache of pool `pool`, holds: its
/// table's first entries and n_cached, one token at least left to compute. Returns the tokens given. Its keys chain
/// from its namespace's root under `model_root`.
int attach_cached_prefix(prefix_cache& cache, const block_key& model_root, uint32_t pool, sequence& seq);

/// Offers `cache` the full blocks of `seq` past its keyed_blocks that pool `pool` holds, keying each.
void offer_computed_blocks(prefix_cache& cache, const block_key& model_root, uint32_t pool, sequence& seq);

/// The full blocks of `seq` with KV that pools other than `pool` hold, keyed from its namespace's root under
/// `model_root`: what their holders' caches may keep once it ends.
std::vector<keyed_block> keyed_blocks_elsewhere(const block_key& model_root, uint32_t pool, const sequence& seq);

/// Whether `b` is a whole full block whose key chains its tokens onto its parent's (a peer's offer, checked).
bool well_keyed(const keyed_block& b);

}  // namespace illm::gpu
