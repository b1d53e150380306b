#pragma once
// Membership: instances join, drain and leave the gManager, whose answer to joins and heartbeats is the
// cluster view.

#include <algorithm>
#include <caf/all.hpp>
#include <cstdint>
#include <string>
#include <vector>
#include "actors/messages/declarations.hpp"
#include "actors/interfaces.hpp"
#include "actors/placement/types.hpp"

namespace illm::actors {

/// One instance as the cluster view shows it.
struct instance_view {
  instance_id inst_id = 0;
  uint32_t total_blocks = 0;
  uint32_t free_blocks = 0;  ///< spare: free, not promised to its requests nor to a room
  bool draining = false;
  rmanager_actor rmanager;
  instance_actor instance;
  std::vector<uint8_t> plane_address;  ///< its data plane's worker address; empty: in-process (already connected)
  /// Blocks it keeps free for a long request that waits for room: it starts no new request in them.
  uint32_t held_for_room = 0;
  std::string node;  ///< the node (host) it runs on; empty: the same as every other's
  /// What other instances may move into: its spare blocks less those held for the waiting room (it refuses
  /// moves into them).
  uint32_t movable_into() const { return free_blocks - std::min(free_blocks, held_for_room); }
};
ILLM_INSPECT(instance_view, x.inst_id, x.total_blocks, x.free_blocks, x.draining, x.rmanager, x.instance,
             x.plane_address, x.held_for_room, x.node)

/// gManager -> rManager (answer to join and heartbeat): the cluster as of the last heartbeats.
struct cluster_view {
  uint64_t epoch = 0;
  std::vector<instance_view> instances;  ///< the members heard from lately
  /// Every member's id, those silent for a while (left out of `instances`) too: an id missing here has
  /// left the cluster or died, one only missing from `instances` may come back.
  std::vector<instance_id> members;
  /// Whether instance `id` is a member (heard from lately or not).
  bool has_member(instance_id id) const { return std::find(members.begin(), members.end(), id) != members.end(); }
  /// Instance `id` as the view has it (none: left out of this view).
  const instance_view* find(instance_id id) const {
    auto it =
        std::find_if(instances.begin(), instances.end(), [id](const instance_view& i) { return i.inst_id == id; });
    return it == instances.end() ? nullptr : &*it;
  }
  uint32_t free_blocks() const {
    uint32_t n = 0;
    for (const auto& i : instances) n += i.free_blocks;
    return n;
  }
};
ILLM_INSPECT(cluster_view, x.epoch, x.instances, x.members)

/// rManager -> gManager: a new instance and its actors.
struct join_cluster {
  instance_id inst_id = 0;
  rmanager_actor rmanager;
  instance_actor instance;
  instance_stats stats;
  std::vector<uint8_t> plane_address;  ///< its data plane's worker address (UCX); empty: in-process
  std::string node;                    ///< the node (host) it runs on; empty: the same as every other's
};
ILLM_INSPECT(join_cluster, x.inst_id, x.rmanager, x.instance, x.stats, x.plane_address, x.node)

/// -> gManager: stop lending to inst_id and stop routing requests to it.
struct drain_instance {
  instance_id inst_id = 0;
};
ILLM_INSPECT(drain_instance, x.inst_id)

/// rManager -> gManager: inst_id leaves the cluster.
struct leave_cluster {
  instance_id inst_id = 0;
};
ILLM_INSPECT(leave_cluster, x.inst_id)

}  // namespace illm::actors
