#pragma once
// The gManager: membership (join, drain, leave, death), the request placement map rebuilt from
// heartbeats alone (so a restarted gManager recovers it), and the placement policy run every period,
// whose decisions go to the source rManagers as move_kvcache. It is never on the data path.

#include <chrono>
#include <memory>

#include "actors/event_log.hpp"
#include "actors/messages.hpp"
#include "actors/metrics/runtime_metrics.hpp"
#include "actors/placement/types.hpp"

namespace illm::actors {

/// What a gManager needs.
struct gmanager_config {
  std::chrono::milliseconds policy_period{100};
  placement::policy policy;  ///< decides the moves each period
  /// An instance whose heartbeat is older than this is left out of the view and the policy.
  std::chrono::milliseconds heartbeat_timeout{2000};
  std::shared_ptr<metrics::runtime_metrics> metrics;  ///< optional
};

/// Spawns a gManager.
caf::actor spawn_gmanager(caf::actor_system& sys, gmanager_config config);

}  // namespace illm::actors
