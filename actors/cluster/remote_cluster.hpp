#pragma once
// A cluster of processes as its front end sees it: the gManager of `illm gmanager --listen`, reached over
// CAF's io middleman, gives the view; requests go to the instance processes of the view, linked directly
// (control_links), and their tokens come back to request actors of this process (`illm serve --gmanager`,
// `illm generate --gmanager`). Without a gManager it serves on from its last view.

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/cluster/control_links.hpp"
#include "actors/cluster/control_security.hpp"
#include "actors/cluster/gmanager_link.hpp"
#include "actors/cluster/request_router.hpp"
#include "gpu/status.hpp"

namespace illm::actors {

/// What a front end knows of the cluster, shared by its actors and its callers' threads.
struct cluster_picture;

/// A connection to a cluster of processes.
class remote_cluster final : public request_router {
 public:
  /// Reaches one of the gManagers at `gmanagers` (the highest epoch of those that answer within `first_wait`)
  /// and has its view; fails when none answers. From then on it follows the gManagers by itself, and keeps
  /// serving from its last view, refreshed by the instances, while none is reachable. `log` gets a line when
  /// the gManager is lost or reached (empty: stderr). Control connections are secured as `security` says;
  /// `on_refused` is told of every peer that refused this process.
  static gpu::result<std::unique_ptr<remote_cluster>> connect(const std::vector<control_endpoint>& gmanagers,
                                                             const control_security& security,
                                                             std::function<void(const std::string&)> log = {},
                                                             std::function<void()> on_refused = {},
                                                             std::chrono::milliseconds first_wait = std::chrono::seconds(10));
  ~remote_cluster() override;

  /// A request the view has no instance for ends at once with an error.
  using request_router::submit;
  request_id submit(const generate_params& params, request_callbacks callbacks, const cluster_view& view) override;
  /// The gManager's view when it is reachable and settled; else the last view, as the instances refresh it.
  cluster_view view() override;
  std::optional<cluster_status> status() override;
  int instances_needed() const override { return 1; }

  /// The gManager's reports of the moves of request `id` (empty when it does not answer).
  std::vector<move_report> moves_of(request_id id);

  /// Whether a gManager is reachable now.
  bool gmanager_linked() const;

  /// Cancels the requests in flight, waits up to `grace` for them to end, then stops every actor.
  void shutdown(std::chrono::milliseconds grace = std::chrono::seconds(5));

 private:
  remote_cluster();
  /// The gManager linked now (none: no gManager is reachable).
  gmanager_actor gmanager() const;

  std::atomic<request_id> next_request_;
  std::shared_ptr<cluster_picture> picture_;
  caf::actor watcher_;
  gmanager_link_actor link_;
  control_links_actor links_;
  std::unique_ptr<caf::actor_system_config> config_;
  std::unique_ptr<caf::actor_system> system_;
  control_plane tls_;  ///< its TLS actor, stopped before the system
  bool stopped_ = false;
};

}  // namespace illm::actors
