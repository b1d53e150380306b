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

/// A list of message types, for register_messages and the fuzzer.
template <class... Ts>
struct message_types {};

/// The messages another process can send this one on the control plane (rManagers, instances, front ends and the
/// gManager), which it decodes from the wire: each is fuzzed (tests/fuzz/fuzz_peer_messages.cpp).
using peer_messages = message_types<
    heartbeat, move_kvcache, try_move_kvcache, move_reservation, commit_move, commit_result, abort_move, release_blocks,
    move_report, keep_blocks, release_room, replicate_blocks, replica_result, replicas_lost, promote_replicas,
    replicas_promoted, report_orphan, orphan_report, adopt_orphan, orphan_adopted, expel_member, drain_instance,
    leave_cluster, join_cluster, cluster_view, use_gmanager, generate_request, token_event, request_finished,
    cancel_request, reserve_room, room_answer, reserve_chunk, prefill_chunk, chunk_started, chunk_done, commit_chunk,
    abort_chunk, take_reservation, return_reservation, cancel_chunk, cluster_status, prefix_lookup, prefix_holders,
    find_prefix, read_prefix, prefix_read, copy_prefix>;

/// The other message types: those that stay in a process (an instance with its rManager and worker, the data plane's
/// events), the attention payloads (decoded by their own parser from the data plane) and types nested in messages.
using other_messages = message_types<
    request_placement_entry, std::vector<request_placement_entry>, instance_stats, std::vector<move_report>,
    instance_view, control_endpoint, attend, partials, transfer_done, peer_failed, incoming_attend, incoming_partials,
    need_blocks, loan_result, pick_blocks, block_pick, blocks_moved, move_abandoned, request_released, placement_update,
    pick_replicas, blocks_replicated, spare_reclaimed, take_over, taken_over, gpu::block_key, gpu::prefix_changes,
    placement::prefix_segment>;

/// Registers every message type with a configuration (call before creating the actor system).
void register_messages(caf::actor_system_config& cfg);

/// Sets the scheduler of a serving process to go to sleep soon when it has nothing to do: CAF's workers
/// otherwise poll for about 25 ms after every message (every heartbeat and policy tick), which keeps an
/// idle process at a quarter of a core. A sleeping worker is woken when a job arrives for it.
void quiet_idle_scheduler(caf::actor_system_config& cfg);

}  // namespace illm::actors
