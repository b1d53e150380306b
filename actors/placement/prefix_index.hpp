#pragma once
// The cluster-wide index of the members' prefix caches, as the gManager keeps it: which member holds which full
// block keys, from the changes each member reports in its heartbeats. Soft state: a report that does not follow
// the one applied before (a heartbeat lost, a gManager that just started) leaves the member out of the index until
// it reports every key it holds. A lookup's answer is a hint; the holder checks the keys and tokens again.

#include <cstdint>
#include <map>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "actors/placement/types.hpp"
#include "gpu/block_key.hpp"
#include "gpu/prefix_cache.hpp"

namespace illm::actors::placement {

/// A run of a chain's blocks one member's cache holds: keys [first, first + count).
struct prefix_segment {
  instance_id holder = 0;
  uint32_t first = 0, count = 0;
  bool operator==(const prefix_segment&) const = default;
};

/// Which member's cache holds which block keys.
class prefix_index {
 public:
  /// Applies `member`'s changes made for its heartbeat `seq`, which follow those of its heartbeat `base`. False when
  /// they do not follow what the index has (nor list every key): the member is left out until a full report.
  bool apply(instance_id member, uint64_t seq, uint64_t base, const gpu::prefix_changes& changes);
  /// Forgets a member that left or died.
  void drop(instance_id member);
  /// Whether the index lost track of `member`'s keys and waits for a full report.
  bool needs_full(instance_id member) const;
  /// Members holding the chain's first block, each with how many of the chain's first blocks it holds, the most
  /// first (ties: the lower id first).
  std::vector<std::pair<instance_id, uint32_t>> lookup(std::span<const gpu::block_key> keys) const;
  /// The longest prefix of the chain the members' caches hold between them, as runs: each the longest one any member
  /// holds from where the one before ends (a conversation whose turns ran on several instances has its history in
  /// pieces: each turn's blocks where it ran).
  std::vector<prefix_segment> cover(std::span<const gpu::block_key> keys) const;
  /// Keys held by `member` (what its last reports add up to).
  size_t keys_of(instance_id member) const;

 private:
  struct member_keys {
    uint64_t applied = 0;  ///< the heartbeat whose changes were applied last
    bool synced = true;    ///< false: a report was missed; waits for a full one
    std::unordered_set<gpu::block_key, gpu::block_key_hash> keys;
  };
  void add(instance_id member, member_keys& m, const gpu::block_key& key);
  void remove(instance_id member, member_keys& m, const gpu::block_key& key);
  void clear(instance_id member, member_keys& m);

  std::map<instance_id, member_keys> members_;
  std::unordered_map<gpu::block_key, std::vector<instance_id>, gpu::block_key_hash> holders_;
};

}  // namespace illm::actors::placement
