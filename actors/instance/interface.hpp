#pragma once
// The instance's typed interface: the messages it takes and what it answers (actors/interfaces.hpp has all four).

#include <cstdint>
#include <vector>

#include <caf/all.hpp>

#include "actors/messages/declarations.hpp"

namespace illm::actors {

/// An instance: admission and continuous batching of its requests (actors/instance/).
using instance_actor = caf::typed_actor<
    // admission: requests in, and the answers to the rooms and loans asked for them
    caf::reacts_to<generate_request>, caf::reacts_to<cancel_request>, caf::reacts_to<room_answer>,
    caf::reacts_to<loan_result>, caf::reacts_to<requeue_atom, request_id>, caf::reacts_to<recheck_atom>,
    // the step loop's view of the cluster (from its rManager)
    caf::reacts_to<cluster_view>,
    // block moves, with its rManager as the source
    caf::replies_to<pick_blocks>::with<block_pick>, caf::replies_to<blocks_moved>::with<bool>,
    caf::reacts_to<move_abandoned>,
    // room prefill: chunks computed here for other instances, and its own chunks' progress elsewhere
    caf::replies_to<prefill_chunk>::with<chunk_done>, caf::reacts_to<cancel_chunk>, caf::reacts_to<chunk_started>,
    // replicas: blocks picked for a second copy, where the copies are, copies lost
    caf::replies_to<pick_replicas>::with<block_pick>, caf::replies_to<blocks_replicated>::with<bool>,
    caf::reacts_to<replicas_lost>>;

}  // namespace illm::actors
