#pragma once
// The rManager of an instance: block accounting, a heartbeat to the gManager every period, the moves
// it executes (ordered by the gManager, or a loan it asks for itself when its pool is full), and the
// reservations it grants to other instances, first come first served against the blocks free at that
// moment, as leases that expire when the source never commits. Every message is idempotent by its id.
//
// A move, at the source: pick the request's oldest full local blocks (the instance marks them),
// try_move_kvcache at the destination, put each block into the reserved memory over the data plane,
// flush, commit_move, then tell the instance to switch its block table and free the local copies.
// A move that fails at any point leaves the request on its old blocks.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/event_log.hpp"
#include "actors/faults/control_faults.hpp"
#include "actors/logic/hosted_blocks.hpp"
#include "actors/logic/peer_nodes.hpp"
#include "actors/logic/pool_promises.hpp"
#include "gpu/prefix_cache.hpp"
#include "actors/messages.hpp"
#include "actors/metrics/runtime_metrics.hpp"
#include "actors/settings/settings.hpp"
#include "gpu/kv_pool.hpp"
#include "gpu/kv_staging.hpp"
#include "transport/transport.hpp"

namespace illm::actors {

/// What an rManager needs.
struct rmanager_config {
  instance_id id = 0;
  std::shared_ptr<gpu::kv_pool> pool;
  std::shared_ptr<gpu::prefix_cache> prefix_cache;  ///< its pool's (none: no prefix caching), for the heartbeats' stats
  gpu::block_key prefix_root;    ///< the root of its keys (the model, its weight and KV types)
  gpu::kv_identity kv;           ///< its pool's KV: what joins, moves, replicas and prefix reads check
  bool shared_prefixes = false;  ///< --prefix-cache cluster: its instance's requests read other caches' prefixes
  int prefix_copy = prefix_copy_by_model;  ///< instance_settings::prefix_copy: when a remote run is copied here
  std::shared_ptr<hosted_blocks> hosted;  ///< shared with the attention server
  std::shared_ptr<pool_promises> promises;  ///< shared with the instance (one is made when none is given)
  std::shared_ptr<transport::data_plane> plane;
  transport::remote_region region;  ///< the registered memory moves land in: the pool's, or `landing`'s
  /// Moves into a pool in device memory land here first (null: the pool is host memory and they land in it).
  std::shared_ptr<gpu::kv_landing> landing;
  /// The rManager's own backend on the pool's device (own stream): it reads blocks out for moves, uploads landed
  /// ones and checksums them (null: the pool's memory is put as it is: host memory, or the simulator's pools).
  std::shared_ptr<gpu::backend> move_device;
  /// The pinned buffers moves out of a device pool are read into, chunk by chunk (null: the pool's memory is
  /// put as it is).
  std::shared_ptr<gpu::outgoing_staging> staging;
  /// The device pools of this process and their GPUs (none: moves always go over the data plane).
  std::shared_ptr<gpu::local_device_pools> local_pools;
  gmanager_actor gmanager;
  std::shared_ptr<event_log> events;
  std::shared_ptr<metrics::runtime_metrics> metrics;  ///< optional
  std::chrono::milliseconds heartbeat_period{50};
  std::chrono::milliseconds lease{2000};         ///< how long a granted reservation waits for its commit
  std::chrono::milliseconds answer_timeout{5000};  ///< how long to wait for a peer's answer
  /// Checksum the blocks this rManager sends, so that the destination commits only what arrived intact
  /// (off in the simulator, whose pools have no contents).
  bool verify_moves = true;
  /// Full blocks of requests of at least this many tokens get a second copy on another instance, from free
  /// memory (0: no replicas).
  uint32_t replica_min_tokens = 0;
  /// How long blocks kept here for a departed owner's request wait for a new owner to take them over (0: freed at
  /// once).
  std::chrono::milliseconds orphan_lease{15000};
  /// The most blocks (or block places) one message of a peer may name, and reservations one peer may hold here
  /// (instance_settings' peer_max_blocks and peer_max_open_moves): a peer beyond them is expelled.
  uint32_t peer_max_blocks = uint32_t(instance_settings{}.peer_max_blocks);
  uint32_t peer_max_open_moves = uint32_t(instance_settings{}.peer_max_open_moves);
  /// This instance's data-plane address, sent with its join (empty: an in-process plane, nothing to exchange).
  std::vector<uint8_t> plane_address;
  std::string node;  ///< the node (host) this instance runs on, sent with its join (empty: one node for all)
  control_endpoint control;  ///< its process's control port, sent with its join (empty: in-process)
  /// Told every view it adopts, on its thread (keep it short; empty: nobody): e.g. the process's control links.
  std::function<void(const cluster_view&)> on_view;
  /// Where the view's instances run, kept up to date from every view (none: not kept).
  std::shared_ptr<peer_nodes> nodes;
  /// Connects the data plane to a peer of the view that has an address and is not connected yet (or whose
  /// address changed); returns an empty string or why not. Empty: never called (an in-process plane).
  std::function<std::string(instance_id peer, const std::vector<uint8_t>& address)> connect_peer;
  /// Control-plane faults to inject (heartbeats, answers to moves and promises, crash points); none: none.
  std::shared_ptr<faults::control_faults> faults;
  /// How this instance dies at a crash point of `faults` (a process: as SIGKILL would; an embedded cluster:
  /// its instance is killed). Empty: the process is killed.
  std::function<void()> crash;
  /// Where the rManager's data-plane lines go (a failed connect, a failed peer); empty: stderr.
  std::function<void(const std::string&)> log;
};

/// Spawns an rManager; it joins the gManager at once. Its instance is attached afterwards with
/// (attach_atom, instance). Without a gManager (gone, or none yet) it serves and lends on from its last view;
/// use_gmanager gives it the one to join next.
rmanager_actor spawn_rmanager(caf::actor_system& sys, rmanager_config config);

}  // namespace illm::actors
