#pragma once
// The words of placement, shared by the policies (plain C++, no CAF) and the protocol messages.

#include <cstdint>
#include <functional>
#include <vector>

#include "gpu/block_key.hpp"

namespace illm::actors {

using instance_id = uint32_t;
using request_id = uint64_t;
using move_id = uint64_t;

/// Where some of a request's KV blocks are: num_blocks of them on inst_id (its owner when local).
struct request_placement_entry {
  request_id req_id = 0;
  instance_id inst_id = 0;
  uint32_t num_blocks = 0;
  bool local = false;
};

/// An instance's load, as its rManager reports it.
struct instance_stats {
  uint32_t total_blocks = 0;
  uint32_t free_blocks = 0;
  uint32_t hosted_blocks = 0;    ///< blocks of other instances' requests kept here (lent)
  uint32_t borrowed_blocks = 0;  ///< blocks of this instance's requests kept elsewhere
  uint32_t batch_size = 0;       ///< running sequences
  uint32_t waiting = 0;          ///< queued requests
  uint32_t waiting_blocks = 0;   ///< blocks the queued requests need (prompt and max tokens)
  bool draining = false;
  uint32_t replica_blocks = 0;   ///< of the free blocks, those keeping replicas (taken only once no other is free)
  uint32_t owned_blocks = 0;     ///< blocks of this instance's own requests kept here
  /// Blocks not in use but spoken for: by its running requests' next tokens, the request first in its queue, and
  /// others' rooms (not counted in free_blocks).
  uint32_t promised_blocks = 0;
  uint32_t cached_blocks = 0;  ///< blocks its prefix cache holds (read by requests or kept in free memory)
  uint32_t shared_blocks = 0;  ///< of those, read by two requests or more now
  /// The root its prefix cache's keys chain from (the model, its weight and KV types; zero: no cache), and whether
  /// its requests read prefixes other instances' caches hold (--prefix-cache cluster): what a router weighs.
  gpu::block_key cache_root;
  bool cache_shared = false;
};

}  // namespace illm::actors

namespace illm::actors::placement {

/// One instance as a placement policy sees it: its load and where its requests' blocks are.
struct instance_snapshot {
  instance_id id = 0;
  instance_stats stats;
  std::vector<request_placement_entry> placement;  ///< entries of the requests it owns
};

/// A decision: move num_blocks of req's full blocks from src (its owner) to dst.
struct move_order {
  request_id req = 0;
  instance_id src = 0;
  instance_id dst = 0;
  uint32_t num_blocks = 0;
};

/// A placement policy: the gManager runs it every period over the latest snapshots.
using policy = std::function<std::vector<move_order>(const std::vector<instance_snapshot>& cluster)>;

}  // namespace illm::actors::placement
