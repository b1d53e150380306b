#pragma once
// A cluster of processes as its front end sees it: the gManager of `illm gmanager --listen`, reached over
// CAF's io middleman; requests go to the instance processes of its view, their tokens come back to
// request actors of this process (`illm serve --gmanager`, `illm generate --gmanager`).

#include <atomic>
#include <memory>
#include <string>

#include "actors/cluster/request_router.hpp"
#include "gpu/status.hpp"

namespace illm::actors {

/// A connection to a cluster of processes.
class remote_cluster final : public request_router {
 public:
  /// Reaches the gManager at host:port and asks for its view once; fails when it does not answer.
  static gpu::result<std::unique_ptr<remote_cluster>> connect(const std::string& host, uint16_t port);
  ~remote_cluster() override;
  remote_cluster(const remote_cluster&) = delete;
  remote_cluster& operator=(const remote_cluster&) = delete;

  /// A request the view has no instance for ends at once with an error.
  using request_router::submit;
  request_id submit(const generate_params& params, request_callbacks callbacks, const cluster_view& view) override;
  cluster_view view() override;
  int instances_needed() const override { return 1; }

  /// The gManager's reports of the moves of request `id` (empty when it does not answer).
  std::vector<move_report> moves_of(request_id id);

  /// False once the gManager's node is gone (its process ended or the link broke).
  bool gmanager_alive() const { return gmanager_alive_->load(); }

  /// Cancels the requests in flight, waits up to `grace` for them to end, then stops every actor.
  void shutdown(std::chrono::milliseconds grace = std::chrono::seconds(5));

 private:
  remote_cluster();

  std::atomic<request_id> next_request_;
  std::shared_ptr<std::atomic<bool>> gmanager_alive_;
  gmanager_actor gmanager_;
  caf::actor watcher_;
  std::unique_ptr<caf::actor_system_config> config_;
  std::unique_ptr<caf::actor_system> system_;
  bool stopped_ = false;
};

}  // namespace illm::actors
