#pragma once
// A process's direct control links to the instance processes of its view. Each instance process listens on
// its own control port (`illm instance --listen`, carried in the view); this actor connects to each one
// once, so that CAF's middleman routes messages between the two processes directly, never through the
// gManager's process (automatic connections stay off). It watches each linked instance's rManager and says
// when one is gone, so that a process learns of a lost instance without the gManager.

#include <functional>
#include <optional>
#include <string>

#include <caf/all.hpp>

#include "actors/messages.hpp"

namespace illm::actors {

/// What the control links need.
struct control_links_config {
  control_endpoint self;  ///< this process's own control port (never connected to); empty: it has none
  /// This process's instance id, when it is one: of two instances only the one with the lower id connects, and
  /// the other watches (two connects at once between two nodes make CAF close one as redundant, which over
  /// TLS broke both nodes' other links).
  std::optional<instance_id> self_id;
  /// Told (on the links' thread) when a linked instance is gone (its process ended or the link broke).
  std::function<void(instance_id, const std::string& why)> on_gone;
  /// Told (on the links' thread) of every link made or failed (why is empty when it was made).
  std::function<void(instance_id, const control_endpoint&, const std::string& why)> on_link;
  /// Told (on the links' thread) when an instance refused this process (e.g. TLS: its certificate).
  std::function<void()> on_refused;
};

/// The links actor: send it every view; it links to the instances it is not linked to yet.
using control_links_actor = caf::typed_actor<caf::reacts_to<cluster_view>>;

/// Spawns the links (hidden: actor_system::await_all_actors_done does not wait for it).
control_links_actor spawn_control_links(caf::actor_system& sys, control_links_config config);

}  // namespace illm::actors
