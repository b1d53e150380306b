#pragma once
// One instance: the pool, worker, attention server, rManager and instance actor, as the embedded
// cluster builds each of its instances and `illm instance --join` builds one, on a data plane of the caller's choice (a transport::ucx_plane between processes) and with
// a gManager that may live in another process (a caf::io proxy). The caller owns the actor system.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpu/engine.hpp"
#include "gpu/grammar/forward.hpp"
#include "gpu/kv_staging.hpp"
#include "actors/checker_hooks.hpp"
#include "actors/event_log.hpp"
#include "actors/faults/control_faults.hpp"
#include "actors/messages.hpp"
#include "actors/logic/room_prefill.hpp"
#include "actors/settings/settings.hpp"
#include "actors/metrics/runtime_metrics.hpp"
#include "gpu/device_weights.hpp"
#include "gpu/kv_pool.hpp"
#include "gpu/weights.hpp"
#include "transport/transport.hpp"

namespace illm::actors {

/// How to build one instance (the per-instance part of cluster_options).
struct instance_node_options {
  instance_id id = 0;
  instance_settings instance;  ///< its pool, threads (0: all cores) and periods
  batch_settings batch;        ///< how it batches its steps
  std::shared_ptr<metrics::runtime_metrics> metrics;  ///< optional
  std::shared_ptr<event_log> events;                  ///< where moves are recorded; empty: its own
  /// The plane's worker address, sent with the join; and how to connect to a peer of the view (see
  /// rmanager_config). Both empty for an in-process plane.
  std::vector<uint8_t> plane_address;
  std::string node;  ///< the node (host) it runs on, in its join (empty: one node for the whole cluster)
  std::function<std::string(instance_id peer, const std::vector<uint8_t>& address)> connect_peer;
  control_endpoint control;  ///< its process's control port, in its join (empty: in-process)
  std::shared_ptr<faults::control_faults> faults;  ///< control-plane faults its rManager injects (none: none)
  /// How it dies at a crash point of `faults` (rmanager_config::crash; empty: the process is killed).
  std::function<void()> crash;
  /// Told every view its rManager adopts, on the rManager's thread (empty: nobody): e.g. the control links.
  std::function<void(const cluster_view&)> on_view;
  std::function<void(const std::string&)> log;
  /// The device pools of this process (an embedded cluster's): moves between two on one GPU copy device to
  /// device. None: every move goes over the data plane.
  std::shared_ptr<gpu::local_device_pools> local_pools;
  /// The weights placed per device in this process (an embedded cluster's): instances on one device share
  /// one copy. None: this instance places its own.
  std::shared_ptr<gpu::device_weights_cache> weights_on_devices;
  delivery_tap tap;                                ///< instance_config::tap
  planted_defect plant = planted_defect::none;  ///< instance_config::plant
  std::shared_ptr<gpu::grammar::constraint_cache> constraints;  ///< instance_config::constraints
};

/// A running instance and what its actors use.
class instance_node {
 public:
  /// Builds the instance on `plane`; its rManager joins `gmanager` at once (then again with its instance).
  static gpu::result<std::unique_ptr<instance_node>> start(caf::actor_system& sys,
                                                          std::shared_ptr<const gpu::model_weights> weights,
                                                          const instance_node_options& options,
                                                          std::shared_ptr<transport::data_plane> plane,
                                                          gmanager_actor gmanager);
  ~instance_node();
  instance_node(const instance_node&) = delete;
  instance_node& operator=(const instance_node&) = delete;

  instance_id id() const;
  rmanager_actor rmanager() const;
  instance_actor instance() const;
  const gpu::kv_pool& pool() const;
  /// Empties its prefix cache (none: nothing); returns the blocks freed now.
  uint32_t flush_prefix_cache();
  /// Its data plane (for the traffic counters).
  const transport::data_plane& plane() const;
  /// Blocks it hosts for other instances' requests (committed moves and chunks).
  uint32_t hosted_count() const;
  /// Blocks it has promised to other instances' rooms and not yet handed over.
  uint32_t promised_count() const;
  /// Landing slots held by moves into its pool not committed or given back yet (0 for a pool in host memory).
  uint32_t landing_taken() const;
  /// Its actors: instance, worker, the two attention servers (decode, prefill), rManager.
  std::vector<caf::actor_addr> actors() const;

  /// The data plane lost `peer` (its endpoint failed): remote attention waiting for it fails at once and
  /// the rManager fails moves to it and reconnects when the view names it again.
  void peer_failed(instance_id peer, const std::string& why);

  /// Makes every actor of the instance go silent, as a hung process (actors/faults/hang.hpp): nobody is told.
  void hang();

  /// Sends an exit to every actor of the instance (the caller then awaits them) and drops the data
  /// plane's handlers into them.
  void stop();

 private:
  struct parts;
  explicit instance_node(std::unique_ptr<parts> p);
  std::unique_ptr<parts> p_;
};

}  // namespace illm::actors
