#pragma once
// A process's link to the gManager of a cluster of processes (`illm instance --join`, `illm serve --gmanager`):
// it reaches one of a list of gManager addresses over CAF's io middleman, follows the one with the highest
// epoch, notices when it is gone, and reaches one again with backoff. The gManager is soft state: while
// none is reachable the process serves on from its last view.

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages.hpp"

namespace illm::actors {

/// What a gManager link needs.
struct gmanager_link_config {
  std::vector<control_endpoint> addresses;  ///< where gManagers may listen, in the order they are tried
  std::chrono::milliseconds min_backoff{100};  ///< the first wait after a failed round, doubled up to max_backoff
  std::chrono::milliseconds max_backoff{1000};
  /// How often, while linked, the other addresses are asked for a gManager of a higher epoch.
  std::chrono::milliseconds probe_period{2000};
  std::chrono::milliseconds answer_timeout{5000};
  /// Told (on the link's thread) of every gManager it links to: its handle, address and epoch.
  std::function<void(const gmanager_actor&, const control_endpoint&, uint64_t epoch)> on_linked;
  /// Told (on the link's thread) when the linked gManager is gone, and why.
  std::function<void(const std::string& why)> on_lost;
  /// Told (on the link's thread) why a round of attempts reached no gManager.
  std::function<void(const std::string& why)> on_failed_round;
  /// Told (on the link's thread) when a gManager refused this process (e.g. TLS: its certificate).
  std::function<void()> on_refused;
};

/// The link actor: it starts trying at once. Stop it with an exit message.
using gmanager_link_actor = caf::typed_actor<caf::reacts_to<liveness_tick_atom>>;

/// Spawns a link (hidden: actor_system::await_all_actors_done does not wait for it).
gmanager_link_actor spawn_gmanager_link(caf::actor_system& sys, gmanager_link_config config);

/// "host:port" of an endpoint.
std::string to_string(const control_endpoint& e);

}  // namespace illm::actors
