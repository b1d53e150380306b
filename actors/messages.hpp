#pragma once
// Every message of the runtime, one header per protocol, all included here. The paper's messages
// (heartbeat, move_kvcache, try_move_kvcache and request_placement_entry) keep its names and fields; around
// them are what a real system needs: membership, leases (commit/abort), rooms, room prefill, block release,
// replicas, owner takeover, the cluster-wide prefix cache, the attention data-plane payloads, and the messages between an instance, its rManager, its worker and its
// requests. Structs with `inspect` overloads, registered by register_messages() so that they can cross
// process boundaries. The typed interfaces of the actors that take them, and the atoms, are in
// actors/interfaces.hpp.

#include <caf/all.hpp>

#include "actors/interfaces.hpp"
#include "actors/messages/instance_rmanager.hpp"
#include "actors/messages/membership.hpp"
#include "actors/messages/placement.hpp"
#include "actors/messages/prefix_cache.hpp"
#include "actors/messages/replicas.hpp"
#include "actors/messages/requests.hpp"
#include "actors/messages/room_prefill.hpp"
#include "actors/messages/rooms.hpp"
#include "actors/messages/status.hpp"
#include "actors/messages/takeover.hpp"
#include "actors/messages/worker.hpp"

namespace illm::actors {

/// Registers every message type with a configuration (call before creating the actor system).
void register_messages(caf::actor_system_config& cfg);

/// Sets the scheduler of a serving process to go to sleep soon when it has nothing to do: CAF's workers
/// otherwise poll for about 25 ms after every message (every heartbeat and policy tick), which keeps an
/// idle process at a quarter of a core. A sleeping worker is woken when a job arrives for it.
void quiet_idle_scheduler(caf::actor_system_config& cfg);

}  // namespace illm::actors
