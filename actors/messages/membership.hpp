#pragma once
// Membership: instances join, drain and leave the gManager, whose answer to joins and heartbeats is the
// cluster view.

#include <algorithm>
#include <caf/all.hpp>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>
#include "actors/messages/declarations.hpp"
#include "actors/interfaces.hpp"
#include "actors/messages/prefix_cache.hpp"
#include "actors/placement/types.hpp"

namespace illm::actors {

/// Where a process's control port listens (CAF's io middleman): peers connect to it once, so that CAF routes
/// their messages to the process's actors directly, never through another process. Empty: in-process.
struct control_endpoint {
  std::string host;
  uint16_t port = 0;
  bool empty() const { return port == 0; }
  friend bool operator==(const control_endpoint& a, const control_endpoint& b) {
    return a.host == b.host && a.port == b.port;
  }
  friend bool operator<(const control_endpoint& a, const control_endpoint& b) {
    return std::tie(a.host, a.port) < std::tie(b.host, b.port);
  }
};
ILLM_INSPECT(control_endpoint, x.host, x.port)

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
  control_endpoint control;  ///< its process's control port (empty: in-process)
  uint32_t replica_blocks = 0;  ///< of its free blocks, those keeping replicas
  /// The gManager's index lost track of its prefix cache (a report missed, or a gManager that just started): its
  /// next heartbeat reports every key it holds.
  bool cache_resync = false;
  /// The root of its prefix cache's keys (zero: no cache) and whether it reads other instances' cached prefixes
  /// (instance_stats::cache_root, cache_shared): how a router looks its cached prefixes up.
  gpu::block_key cache_root;
  bool cache_shared = false;
  gpu::kv_identity kv;  ///< its pool's KV identity (join_cluster::kv)
  /// Blocks its queued requests need (instance_stats::waiting_blocks): work routed there that has not started.
  uint32_t waiting_blocks = 0;
  /// What other instances may move into: its spare blocks less those held for the waiting room (it refuses
  /// moves into them).
  uint32_t movable_into() const { return free_blocks - std::min(free_blocks, held_for_room); }
  /// What a new replica may take: what others may move into, less the replicas kept already.
  uint32_t replica_room() const { return movable_into() - std::min(movable_into(), replica_blocks); }
};
ILLM_INSPECT(instance_view, x.inst_id, x.total_blocks, x.free_blocks, x.draining, x.rmanager, x.instance,
             x.plane_address, x.held_for_room, x.node, x.control, x.replica_blocks, x.cache_resync, x.cache_root,
             x.cache_shared, x.kv, x.waiting_blocks)

/// gManager -> rManager (answer to join and heartbeat): the cluster as of the last heartbeats. Views are
/// ordered by (epoch, version): a gManager that starts has a higher epoch than the one before it, and each of
/// its views a higher version than the last.
struct cluster_view {
  uint64_t epoch = 0;    ///< the gManager's epoch, fixed when it starts
  uint64_t version = 0;  ///< counts the gManager's changes within its epoch
  /// False while a gManager that just started rebuilds membership from the rManagers' joins and heartbeats:
  /// a member missing from such a view may only not have reported yet, so nothing is released for it.
  bool settled = true;
  std::vector<instance_view> instances;  ///< the members heard from lately
  /// Every member's id, those silent for a while (left out of `instances`) too: an id missing here has
  /// left the cluster or died, one only missing from `instances` may come back.
  std::vector<instance_id> members;
  /// The blocks of every member's pool, those silent for a while too: what the cluster can hold (a member late
  /// with its heartbeats on a loaded machine still holds its pool).
  uint64_t member_blocks = 0;
  /// Whether this view comes after `other` (a later gManager, or a later change of the same one).
  bool newer_than(const cluster_view& other) const {
    return std::tie(epoch, version) > std::tie(other.epoch, other.version);
  }
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
ILLM_INSPECT(cluster_view, x.epoch, x.version, x.settled, x.instances, x.members, x.member_blocks)

/// rManager -> gManager: a new instance and its actors.
struct join_cluster {
  instance_id inst_id = 0;
  rmanager_actor rmanager;
  instance_actor instance;
  instance_stats stats;
  std::vector<uint8_t> plane_address;  ///< its data plane's worker address (UCX); empty: in-process
  std::string node;                    ///< the node (host) it runs on; empty: the same as every other's
  control_endpoint control;            ///< its process's control port (empty: in-process)
  uint64_t known_epoch = 0;            ///< the epoch of the last view it had (0: none): a gManager before this one
  std::vector<instance_id> known_members;  ///< the members of that view: the new gManager waits for them
  /// Its pool's KV identity: an instance of another model or KV type than the members' is refused.
  gpu::kv_identity kv;
};
ILLM_INSPECT(join_cluster, x.inst_id, x.rmanager, x.instance, x.stats, x.plane_address, x.node, x.control,
             x.known_epoch, x.known_members, x.kv)

/// -> gManager: stop lending to inst_id and stop routing requests to it.
struct drain_instance {
  instance_id inst_id = 0;
};
ILLM_INSPECT(drain_instance, x.inst_id)

/// -> rManager: the gManager to join and report to from now on (one that started, or was reached again).
struct use_gmanager {
  gmanager_actor gmanager;
};
ILLM_INSPECT(use_gmanager, x.gmanager)

/// rManager -> gManager: `offender` sent `reporter` a message beyond a limit of the protocol (more blocks than a
/// message may name, more open moves than a peer may hold): the gManager expels it, and refuses its rManager's
/// joins while it runs.
struct expel_member {
  instance_id offender = 0;
  instance_id reporter = 0;
  std::string reason;
};
ILLM_INSPECT(expel_member, x.offender, x.reporter, x.reason)

/// rManager -> gManager: inst_id leaves the cluster.
struct leave_cluster {
  instance_id inst_id = 0;
};
ILLM_INSPECT(leave_cluster, x.inst_id)

}  // namespace illm::actors
