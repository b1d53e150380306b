#pragma once
// An embedded cluster: a gManager and N instances (each with its rManager, worker, attention server,
// engine, KV pool and data-plane endpoint) in one process, on the real actors and protocol, routing
// requests as the front end asks (request_router: for the HTTP front end and `illm generate --instances N`).

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "actors/event_log.hpp"
#include "actors/gmanager.hpp"
#include "actors/faults/control_faults.hpp"
#include "actors/messages.hpp"
#include "actors/logic/room_prefill.hpp"
#include "actors/settings/settings.hpp"
#include "actors/metrics/runtime_metrics.hpp"
#include "actors/placement/types.hpp"
#include "gpu/engine.hpp"
#include "gpu/grammar/forward.hpp"
#include "gpu/kv_staging.hpp"
#include "actors/request.hpp"
#include "actors/cluster/request_router.hpp"
#include "gpu/weights.hpp"
#include "transport/registry.hpp"
#include "transport/transport.hpp"

namespace illm::actors {

class instance_node;

/// How to build an embedded cluster.
struct cluster_options {
  int instances = 2;
  instance_settings instance;  ///< every instance's pool, threads (0: cores / instances) and periods
  batch_settings batch;        ///< how every instance batches its steps
  gmanager_settings gmanager;  ///< the gManager's periods
  placement::policy policy;    ///< empty: the simple policy
  std::shared_ptr<metrics::runtime_metrics> metrics;  ///< optional: where the actors report
  /// Faults to inject (empty: none): the data plane is wrapped (faulty:inproc) when any are asked for, and
  /// every rManager and the gManager inject their control-plane faults. At a crash point, an instance is
  /// killed (kill_instance) and the gManager is replaced (restart_gmanager).
  faults::fault_plan faults;
  /// A request whose instance left the cluster (killed) goes on on another instance with its tokens so far
  /// (as a front end of processes does); else it ends with an error.
  bool resume_elsewhere = false;
  /// Moves between device pools on one GPU copy device to device; false: through host staging and landing
  /// slots, as between processes.
  bool device_copies = true;
  /// Where the rManagers' lines go (a data-plane peer failed, a departed owner's blocks released); empty: stderr.
  std::function<void(const std::string&)> log;
  /// The books' hooks (tests and `illm chaos`): told every token and end the instances send; a defect planted.
  delivery_tap tap;
  planted_defect plant = planted_defect::none;
  /// The grammars of structured outputs over the model's vocabulary, shared by the instances (none: a request
  /// with one fails).
  std::shared_ptr<gpu::grammar::constraint_cache> constraints;
};

/// One instance's pool and data-plane traffic, for reports and tests.
struct instance_report {
  instance_id id = 0;
  uint32_t total_blocks = 0;
  uint32_t free_blocks = 0;  ///< free or spare (replicas' blocks count as free)
  gpu::status accounting;  ///< the pool's own consistency check
  transport::traffic traffic;
  bool alive = true;  ///< false once killed (kill_instance): its pool is left as it was
  uint32_t hosted_blocks = 0;    ///< held for other instances' requests
  uint32_t promised_blocks = 0;  ///< promised to other instances' rooms, not yet handed over
  uint32_t replica_blocks = 0;   ///< spare blocks keeping second copies of blocks (replicas)
  uint32_t landing_taken = 0;    ///< landing slots of moves into a device pool still in flight
};

/// A running embedded cluster.
class cluster final : public request_router {
 public:
  /// Builds and starts the cluster; returns once every instance has joined the gManager.
  static gpu::result<std::unique_ptr<cluster>> start(std::shared_ptr<const gpu::model_weights> weights,
                                                     const cluster_options& options);
  ~cluster();

  using request_router::submit;
  request_id submit(const generate_params& params, request_callbacks callbacks, const cluster_view& view) override;
  cluster_view view() override;
  std::optional<cluster_status> status() override;
  /// Every instance of the cluster.
  int instances_needed() const override { return size(); }
  std::optional<uint64_t> reset_prefix_cache() override;

  /// Pools and traffic of every instance.
  std::vector<instance_report> instances() const;
  /// Every move so far with its outcome.
  std::vector<move_report> moves() const { return events_->moves(); }
  int size() const;
  /// How many times the instances' weights were placed on a device: one per device in use, however many
  /// instances share it.
  int weight_placements() const { return weights_on_devices_->placements(); }
  /// The faults injected so far, by kind, data and control planes together.
  faults::fault_counts faults_injected() const;
  /// How much of `params`' prompt each instance's prefix cache holds, as the gManager's index has it (what the
  /// router weighs).
  prefix_hits cached_prefix(const generate_params& params);

  /// Kills instance `id` as a crash would: its actors exit at once, the other instances' data planes hear that
  /// it failed, and once the gManager's view has lost it the request actors are told (those it served go on
  /// elsewhere with cluster_options::resume_elsewhere). False when it is no live instance.
  bool kill_instance(instance_id id);
  /// Makes instance `id` hang as a frozen process would: its actors go silent and nobody is told, so only its
  /// missed heartbeats reveal it (the gManager declares it dead after gmanager_settings::dead_after_ms, and the
  /// request actors it served go on elsewhere then). False when it is no live instance.
  bool hang_instance(instance_id id);
  /// Stops the gManager as a crash would and starts another in its place (a higher epoch): every rManager
  /// joins it, and it rebuilds membership and the placement map from their joins and heartbeats.
  void restart_gmanager();
  /// Drains instance `id` through the gManager: no new requests or loans go to it.
  void drain_instance(instance_id id);
  /// Starts another instance, as cluster_options made the others, and waits until the gManager lists it: it
  /// joins while the others serve. Returns its id.
  gpu::result<instance_id> add_instance();
  /// Cuts instance `id` off the data plane, both ways, for `duration` (its control messages still pass):
  /// remote attention, moves and chunks between it and the others fail until the partition heals. False when
  /// the planes inject no faults (cluster_options::faults is empty) or `id` is no live instance.
  bool partition_instance(instance_id id, std::chrono::milliseconds duration);

  /// The group of the instances' inproc data planes: an endpoint made in it reaches them as a peer process
  /// would (what a sender that is no member can push at them).
  std::shared_ptr<transport::plane_group> plane_group() const { return group_; }

  /// Waits until every pool is back to all blocks free (releases are asynchronous: after a request
  /// ends, its holders free their blocks a moment later); false on timeout.
  bool wait_pools_free(std::chrono::milliseconds timeout);

  /// Stops every actor (in-flight requests end as cancelled) and waits for them.
  void shutdown();

 private:
  explicit cluster(bool resume_elsewhere);
  gpu::status build(std::shared_ptr<const gpu::model_weights> weights, const cluster_options& options);
  /// Makes instance `id` (its plane, its node) on the gManager now.
  gpu::result<std::unique_ptr<instance_node>> make_node(instance_id id);
  /// Waits until the gManager's view lists `count` instances, each with its instance actor.
  bool wait_members(size_t count);
  /// The nodes now (add_instance appends while others read).
  std::vector<instance_node*> nodes() const;
  bool killed(instance_id id) const;
  /// Marks instance `id` gone (killed or hung: no longer alive in reports); its node, or null when it is no live
  /// instance.
  instance_node* mark_gone(instance_id id);
  /// Stops instance `id`'s actors as a crash would; false when it is no live instance.
  bool stop_instance(instance_id id);
  /// Tells the others that `id` died, waits until the gManager's view has lost it, and tells the requests.
  void announce_death(instance_id id);
  /// A crash point of the fault plan was reached, or a member was declared dead, on an actor's thread: the rest
  /// happens on a thread of its own.
  void after_crash(std::function<void()> rest);

  std::shared_ptr<const gpu::model_weights> weights_;
  cluster_options options_;
  std::shared_ptr<transport::plane_group> group_;
  mutable std::mutex nodes_mutex_;
  std::vector<std::unique_ptr<instance_node>> nodes_;
  std::vector<std::shared_ptr<transport::data_plane>> planes_;  ///< by instance id
  std::shared_ptr<faults::control_faults> control_faults_;  ///< none without control-plane faults
  std::shared_ptr<event_log> events_;
  std::shared_ptr<gpu::local_device_pools> local_pools_ = std::make_shared<gpu::local_device_pools>();
  /// The weights on each device the instances run on: one copy per device, not per instance.
  std::shared_ptr<gpu::device_weights_cache> weights_on_devices_ = std::make_shared<gpu::device_weights_cache>();
  std::atomic<request_id> next_request_{1};
  /// The gManager now (restart_gmanager replaces it while front-end threads read it).
  gmanager_actor gmanager() const;

  mutable std::mutex gmanager_mutex_;
  gmanager_actor gmanager_;
  gmanager_config gmanager_config_;  ///< how the gManager was made (restart_gmanager makes another alike)
  std::vector<bool> killed_;         ///< by instance id (under nodes_mutex_)
  std::mutex crash_mutex_;
  std::vector<std::thread> crash_threads_;  ///< after_crash's, joined at shutdown
  std::unique_ptr<caf::actor_system_config> config_;
  std::unique_ptr<caf::actor_system> system_;  // destroyed first: its actors use the nodes
  bool stopped_ = false;
};

}  // namespace illm::actors
