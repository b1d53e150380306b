#pragma once
// The rManager's typed interface: the messages it takes and what it answers (actors/interfaces.hpp has all four).

#include <cstdint>
#include <vector>

#include <caf/all.hpp>

#include "actors/instance/interface.hpp"
#include "actors/messages/declarations.hpp"
#include "actors/placement/types.hpp"

namespace illm::actors {

/// An rManager: its instance's blocks, heartbeats and moves (actors/rmanager/).
using rmanager_actor = caf::typed_actor<
    // view: its instance attached, heartbeats and views, data-plane peers, placement, stats, its gManager, its last view
    caf::reacts_to<attach_atom, instance_actor>, caf::reacts_to<heartbeat_tick_atom>, caf::reacts_to<cluster_view>,
    caf::reacts_to<peer_failed>, caf::reacts_to<drain_instance>, caf::reacts_to<placement_update>,
    caf::replies_to<caf::get_atom>::with<instance_stats>, caf::reacts_to<use_gmanager>,
    caf::replies_to<view_atom>::with<cluster_view>, caf::reacts_to<deferred_atom, uint64_t>,
    // move source: the gManager's orders, its instance's loans, the copy's completions
    caf::reacts_to<move_kvcache>, caf::reacts_to<need_blocks>, caf::reacts_to<transfer_done>,
    // move destination: reservations as leases, commits, give-backs, releases
    caf::replies_to<try_move_kvcache>::with<move_reservation>, caf::replies_to<commit_move>::with<commit_result>,
    caf::reacts_to<abort_move>, caf::reacts_to<lease_check_atom, move_id>,
    caf::replies_to<take_reservation>::with<std::vector<uint32_t>>, caf::reacts_to<return_reservation>,
    caf::reacts_to<release_blocks>,
    // rooms: kept for others, asked for its own requests, released when they end
    caf::replies_to<keep_blocks>::with<uint32_t>, caf::reacts_to<reserve_room>, caf::reacts_to<request_released>,
    // room prefill at the owner: chunks reserved at their holders and committed there
    caf::replies_to<reserve_chunk>::with<move_reservation>, caf::replies_to<commit_chunk>::with<bool>,
    caf::reacts_to<abort_chunk>,
    // replicas: copies of its requests' blocks made elsewhere, copies made from here, copies kept here
    caf::replies_to<replicate_blocks>::with<replica_result>, caf::reacts_to<replicas_lost>,
    caf::reacts_to<spare_reclaimed>, caf::replies_to<promote_replicas>::with<replicas_promoted>,
    // owner takeover: its instance's request taken over, a departed owner's blocks reported and handed over
    caf::replies_to<take_over>::with<taken_over>, caf::replies_to<report_orphan>::with<orphan_report>,
    caf::replies_to<adopt_orphan>::with<orphan_adopted>,
    // the cluster-wide prefix cache: its instance's requests' prefixes found elsewhere, peers' read here
    caf::replies_to<find_prefix>::with<taken_over>, caf::replies_to<read_prefix>::with<prefix_read>,
    caf::replies_to<copy_prefix>::with<replica_result>>;

}  // namespace illm::actors
