#pragma once
// The gManager's typed interface: the messages it takes and what it answers (actors/interfaces.hpp has all four).

#include <cstdint>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages/declarations.hpp"
#include "actors/placement/types.hpp"

namespace illm::actors {

/// The gManager: membership, the placement map from heartbeats, the placement policy, rooms (actors/gmanager).
using gmanager_actor = caf::typed_actor<
    caf::replies_to<join_cluster>::with<cluster_view>, caf::replies_to<heartbeat>::with<cluster_view>,
    caf::replies_to<view_atom>::with<cluster_view>,
    caf::replies_to<status_atom>::with<cluster_status>, caf::reacts_to<drain_instance>, caf::reacts_to<leave_cluster>, caf::reacts_to<expel_member>,
    caf::reacts_to<policy_tick_atom>, caf::reacts_to<move_report>,
    caf::replies_to<moves_atom, request_id>::with<std::vector<move_report>>,
    caf::replies_to<reserve_room>::with<room_answer>, caf::reacts_to<release_room>,
    caf::replies_to<prefix_lookup>::with<prefix_holders>>;

}  // namespace illm::actors
