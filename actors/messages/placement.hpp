#pragma once
// The paper's protocol (heartbeat, move_kvcache, try_move_kvcache; request_placement_entry and
// instance_stats are in actors/placement/types.hpp) and what a move needs around it: the reservation as a
// lease, commit and abort, the release of a request's blocks, and the report of how a move ended.

#include <caf/all.hpp>
#include <cstdint>
#include <string>
#include <vector>
#include "actors/messages/declarations.hpp"
#include "actors/messages/prefix_cache.hpp"
#include "actors/placement/types.hpp"

namespace illm::actors {

/// rManager -> gManager, every period: stats and the placement of the instance's requests, and (with a cluster-wide
/// prefix cache) its cache's changes since the heartbeat numbered cache_base (actors/messages/prefix_cache.hpp).
struct heartbeat {
  instance_id inst_id = 0;
  uint64_t seq = 0;
  instance_stats stats;
  std::vector<request_placement_entry> placement;
  gpu::prefix_changes cache;
  uint64_t cache_base = 0;
};
ILLM_INSPECT(heartbeat, x.inst_id, x.seq, x.stats, x.placement, x.cache, x.cache_base)

/// gManager -> source rManager: move num_blocks of req_id's blocks to dst_inst.
struct move_kvcache {
  move_id id = 0;  ///< names the move in every later message about it
  request_id req_id = 0;
  uint32_t num_blocks = 0;   ///< of req_id's full blocks at the source
  instance_id dst_inst = 0;  ///< the creditor that takes them
};
ILLM_INSPECT(move_kvcache, x.id, x.req_id, x.num_blocks, x.dst_inst)

/// source rManager -> destination rManager: reserve num_blocks for req_id (answer: move_reservation,
/// granted or refused), first come first served against the blocks free at that moment.
struct try_move_kvcache {
  move_id id = 0;
  request_id req_id = 0;
  uint32_t num_blocks = 0;
  instance_id src_inst = 0;  ///< the debtor whose blocks would come (for a replica: the request's owner)
  bool replica = false;      ///< a second copy (actors/messages/replicas.hpp): only from blocks free for nobody else
  gpu::kv_identity kv;       ///< the source's pool's: a destination of another model or KV type refuses the move
};
ILLM_INSPECT(try_move_kvcache, x.id, x.req_id, x.num_blocks, x.src_inst, x.replica, x.kv)

/// The answer to try_move_kvcache: granted (blocks reserved at the destination until the lease ends,
/// and where to put them) or refused (a result, not an error: the destination is full or draining).
struct move_reservation {
  move_id id = 0;
  instance_id dst_inst = 0;
  bool granted = false;
  std::string reason;            ///< why not, when refused
  uint32_t free_blocks = 0;      ///< free at the destination when it answered
  std::vector<uint32_t> blocks;  ///< physical blocks at the destination
  /// Where each block's bytes go in the registered region, in blocks of block_bytes: the landing slots of a
  /// destination whose pool is in device memory (uploaded into `blocks` at the commit); empty: `blocks`.
  std::vector<uint32_t> landing;
  uint64_t region_address = 0;   ///< the destination's registered memory (its pool, or its landing arena)
  uint64_t region_bytes = 0;
  std::vector<uint8_t> region_key;
  uint64_t block_bytes = 0;
  int64_t lease_ms = 0;
  gpu::kv_identity kv;  ///< the destination's pool's: the source checks it too
};
ILLM_INSPECT(move_reservation, x.id, x.dst_inst, x.granted, x.reason, x.free_blocks, x.blocks, x.landing, x.region_address,
             x.region_bytes, x.region_key, x.block_bytes, x.lease_ms, x.kv)

/// source -> destination after the copy: the reserved blocks now hold req_id's KV at these logical
/// places (answer: commit_result, refused when the lease is over).
struct commit_move {
  move_id id = 0;
  request_id req_id = 0;
  instance_id src_inst = 0;
  std::vector<uint32_t> logical;  ///< one per reserved block, in the reservation's order
  bool checksummed = false;       ///< the source sends a checksum: the destination verifies it
  uint64_t checksum = 0;          ///< of the blocks as the source sent them (kv_pool::checksum), in that order
  /// The source copied the bytes straight into the reserved blocks (device to device, within one process): none
  /// landed in landing slots.
  bool in_place = false;
};
ILLM_INSPECT(commit_move, x.id, x.req_id, x.src_inst, x.logical, x.checksummed, x.checksum, x.in_place)

// commit_result, a move_outcome (declarations.hpp): the answer to commit_move.

// abort_move, a move_notice (declarations.hpp): source -> destination: give the reservation (or the committed blocks)
// of a move back.

/// owner -> holder: req_id ended; free every block held for it and forget its room's promise. The holder's cache
/// keeps the `kept` blocks (the request's full blocks it hosts, keyed) that it hosts at those places.
struct release_blocks {
  request_id req_id = 0;
  instance_id owner = 0;
  std::vector<gpu::keyed_block> kept;
};
ILLM_INSPECT(release_blocks, x.req_id, x.owner, x.kept)

/// rManager -> gManager and the event log: how a move ended.
struct move_report {
  move_id id = 0;
  request_id req_id = 0;
  instance_id src_inst = 0;
  instance_id dst_inst = 0;
  uint32_t blocks = 0;
  bool ok = false;
  bool self_initiated = false;  ///< a loan the rManager asked for, not a gManager order
  std::string reason;
  bool computed = false;  ///< a room's chunk, computed at the destination (nothing was copied)
};
ILLM_INSPECT(move_report, x.id, x.req_id, x.src_inst, x.dst_inst, x.blocks, x.ok, x.self_initiated, x.reason,
             x.computed)

// CAF serialization of the types of actors/placement/types.hpp that these messages carry.
ILLM_INSPECT(request_placement_entry, x.req_id, x.inst_id, x.num_blocks, x.local)
ILLM_INSPECT(instance_stats, x.total_blocks, x.free_blocks, x.hosted_blocks, x.borrowed_blocks, x.batch_size, x.waiting,
             x.waiting_blocks, x.draining, x.replica_blocks, x.owned_blocks, x.promised_blocks, x.cached_blocks,
             x.shared_blocks, x.cache_root, x.cache_shared)

}  // namespace illm::actors
