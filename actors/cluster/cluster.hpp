#pragma once
// An embedded cluster: a gManager and N instances (each with its rManager, worker, attention server,
// engine, KV pool and data-plane endpoint) in one process, on the real actors and protocol, routing
// requests as the front end asks (request_router: for the HTTP front end and `illm generate --instances N`).

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "actors/event_log.hpp"
#include "actors/messages.hpp"
#include "actors/logic/room_prefill.hpp"
#include "actors/settings/settings.hpp"
#include "actors/metrics/runtime_metrics.hpp"
#include "actors/placement/types.hpp"
#include "gpu/engine.hpp"
#include "actors/request.hpp"
#include "actors/cluster/request_router.hpp"
#include "gpu/weights.hpp"
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
};

/// One instance's pool and data-plane traffic, for reports and tests.
struct instance_report {
  instance_id id = 0;
  uint32_t total_blocks = 0;
  uint32_t free_blocks = 0;
  gpu::status accounting;  ///< the pool's own consistency check
  transport::traffic traffic;
};

/// A running embedded cluster.
class cluster final : public request_router {
 public:
  /// Builds and starts the cluster; returns once every instance has joined the gManager.
  static gpu::result<std::unique_ptr<cluster>> start(std::shared_ptr<const gpu::model_weights> weights,
                                                     const cluster_options& options);
  ~cluster();
  cluster(const cluster&) = delete;
  cluster& operator=(const cluster&) = delete;

  using request_router::submit;
  request_id submit(const generate_params& params, request_callbacks callbacks, const cluster_view& view) override;
  cluster_view view() override;
  /// Every instance of the cluster.
  int instances_needed() const override { return size(); }

  /// Pools and traffic of every instance.
  std::vector<instance_report> instances() const;
  /// Every move so far with its outcome.
  std::vector<move_report> moves() const { return events_->moves(); }
  int size() const;

  /// Waits until every pool is back to all blocks free (releases are asynchronous: after a request
  /// ends, its holders free their blocks a moment later); false on timeout.
  bool wait_pools_free(std::chrono::milliseconds timeout);

  /// Stops every actor (in-flight requests end as cancelled) and waits for them.
  void shutdown();

 private:
  cluster();
  gpu::status build(std::shared_ptr<const gpu::model_weights> weights, const cluster_options& options);

  std::vector<std::unique_ptr<instance_node>> nodes_;
  std::shared_ptr<event_log> events_;
  std::atomic<request_id> next_request_{1};
  gmanager_actor gmanager_;
  std::unique_ptr<caf::actor_system_config> config_;
  std::unique_ptr<caf::actor_system> system_;  // destroyed first: its actors use the nodes
  bool stopped_ = false;
};

}  // namespace illm::actors
