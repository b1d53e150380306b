#pragma once
// The gManager: membership (join, drain, leave, death), the request placement map rebuilt from
// heartbeats alone (so a restarted gManager recovers it), and the placement policy run every period,
// whose decisions go to the source rManagers as move_kvcache. It is never on the data path.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/event_log.hpp"
#include "actors/faults/control_faults.hpp"
#include "actors/messages.hpp"
#include "actors/metrics/runtime_metrics.hpp"
#include "actors/placement/types.hpp"
#include "actors/logic/room_prefill.hpp"

namespace illm::actors {

/// A membership change, as the gManager tells its owner (e.g. `illm gmanager`'s log).
struct membership_event {
  enum class kind { joined, draining, left, down };
  kind what = kind::joined;
  instance_id inst_id = 0;
  std::string reason;  ///< down: why (the exit reason of its rManager, e.g. the link to it was lost)
  /// down: the requests it owned (from the placement map), lost with it, and others' requests that had blocks
  /// hosted on it (from their placement), which lose those blocks.
  std::vector<request_id> lost_requests, lost_hosted;
};

/// The name of a membership change: joined, draining, left, down.
const char* to_string(membership_event::kind k);

/// What a gManager needs.
struct gmanager_config {
  std::chrono::milliseconds policy_period{100};
  placement::policy policy;  ///< decides the moves each period
  /// An instance whose heartbeat is older than this is left out of the view and the policy.
  std::chrono::milliseconds heartbeat_timeout{2000};
  /// A member whose heartbeat is older than this is declared dead, as if its rManager had gone down (nothing else
  /// may tell: a hung process, a cut network): it leaves the view, and its requests go on elsewhere.
  std::chrono::milliseconds dead_after{10000};
  std::shared_ptr<metrics::runtime_metrics> metrics;  ///< optional
  /// Optional: told of every membership change, on the gManager's thread (keep it short).
  std::function<void(const membership_event&)> on_membership;
  /// Optional: told of every move report (orders and loans), on the gManager's thread (keep it short).
  std::function<void(const move_report&)> on_move;
  /// While a long request waits for its room, a younger one whose room is no larger and fits in what is spare
  /// has its room first, until the waiting one has waited this long; from then on the members hold blocks back
  /// for it and younger rooms wait (0: they always wait).
  std::chrono::milliseconds room_pass_limit = default_room_pass_limit;
  /// Its epoch, higher than that of any gManager of the cluster before it (default: the time it starts, in
  /// microseconds since 1970): rManagers follow the highest. When members of an earlier gManager join it, it
  /// rebuilds membership, the placement map and the spare counts from their joins and heartbeats until every
  /// member they knew has joined, or a heartbeat timeout after the last such join (views say settled = false
  /// meanwhile), and grants no room and orders no move meanwhile. The promises of rooms are the holders'
  /// own: their spare counts leave them out.
  uint64_t epoch = default_epoch();
  /// Control-plane faults it injects into its move orders (order.*) and where it crashes (crash=after_order);
  /// none: none.
  std::shared_ptr<faults::control_faults> faults;
  /// How it dies at its crash point (a process: as SIGKILL would; an embedded cluster: another is started).
  /// Empty: the process is killed.
  std::function<void()> crash;
  /// The time now in microseconds since 1970.
  static uint64_t default_epoch();
};

/// Spawns a gManager.
gmanager_actor spawn_gmanager(caf::actor_system& sys, gmanager_config config);

}  // namespace illm::actors
