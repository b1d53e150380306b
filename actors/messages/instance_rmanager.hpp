#pragma once
// An instance and its rManager: loans, the blocks a move picks and switches, placement updates; and the data
// plane's events as messages (a copy's completion, a failed peer, attend and partials payloads that arrived;
// attend and partials themselves are in actors/logic/attention_wire.hpp).

#include <caf/all.hpp>
#include <cstdint>
#include <string>
#include <vector>
#include "actors/messages/declarations.hpp"
#include "actors/logic/attention_wire.hpp"
#include "actors/messages/prefix_cache.hpp"
#include "actors/placement/types.hpp"

namespace illm::actors {

/// instance -> rManager: a request needs num_blocks more than the local pool has (a loan).
struct need_blocks {
  request_id req_id = 0;
  uint32_t num_blocks = 0;
};
ILLM_INSPECT(need_blocks, x.req_id, x.num_blocks)

/// rManager -> instance: the loan is done (blocks were freed here) or cannot be had.
struct loan_result {
  bool ok = false;
  std::string reason;
};
ILLM_INSPECT(loan_result, x.ok, x.reason)

/// rManager -> instance: choose up to max_blocks full local blocks of req_id to move (answer: block_pick).
/// A request id of 0 lets the instance choose the request (its longest).
struct pick_blocks {
  move_id id = 0;
  request_id req_id = 0;
  uint32_t max_blocks = 0;
  bool only_this = false;  ///< blocks of req_id or none (else, when it has none, the request with the most)
};
ILLM_INSPECT(pick_blocks, x.id, x.req_id, x.max_blocks, x.only_this)

/// instance -> rManager: the blocks chosen (oldest first), now marked as moving.
struct block_pick {
  move_id id = 0;
  request_id req_id = 0;
  std::vector<uint32_t> logical;
  std::vector<uint32_t> physical;  ///< at `holder`
  instance_id holder = 0;          ///< where they are (for a move: the instance itself)
};
ILLM_INSPECT(block_pick, x.id, x.req_id, x.logical, x.physical, x.holder)

/// rManager -> instance: the copy is confirmed; switch these logical blocks to dst and free the local ones.
struct blocks_moved {
  move_id id = 0;
  request_id req_id = 0;
  instance_id dst_inst = 0;
  std::vector<uint32_t> logical;
  std::vector<uint32_t> dst_blocks;
};
ILLM_INSPECT(blocks_moved, x.id, x.req_id, x.dst_inst, x.logical, x.dst_blocks)

/// rManager -> instance: the move failed; the request keeps reading these local blocks.
struct move_abandoned {
  move_id id = 0;
  request_id req_id = 0;
  std::vector<uint32_t> logical;
};
ILLM_INSPECT(move_abandoned, x.id, x.req_id, x.logical)

/// instance -> rManager: req_id ended; its blocks elsewhere can be released, and its full blocks there, keyed, kept
/// by their holders' caches (empty when it starts over, or without a prefix cache).
struct request_released {
  request_id req_id = 0;
  std::vector<gpu::keyed_block> kept;
};
ILLM_INSPECT(request_released, x.req_id, x.kept)

/// instance -> rManager, after every change: placement and load for the heartbeat.
struct placement_update {
  std::vector<request_placement_entry> placement;
  uint32_t batch_size = 0;
  uint32_t waiting = 0;
  uint32_t waiting_blocks = 0;
  uint32_t promised_blocks = 0;  ///< blocks the running requests will still take (free, but spoken for)
};
ILLM_INSPECT(placement_update, x.placement, x.batch_size, x.waiting, x.waiting_blocks, x.promised_blocks)

/// The data plane's completion of a move's copy, turned into a message for the rManager.
struct transfer_done {
  move_id id = 0;
  bool ok = false;
  std::string error;  ///< the plane's, when not ok
};
ILLM_INSPECT(transfer_done, x.id, x.ok, x.error)

/// The data plane -> rManager: the endpoint to a peer failed (the peer is treated as a failed destination).
struct peer_failed {
  instance_id peer = 0;
  std::string reason;
};
ILLM_INSPECT(peer_failed, x.peer, x.reason)

/// An attend payload that arrived on the data plane, for the attention server.
struct incoming_attend {
  instance_id from = 0;
  std::vector<uint8_t> payload;
};
ILLM_INSPECT(incoming_attend, x.from, x.payload)

/// A partials payload answering an attend that the attention server relayed, for it.
struct incoming_partials {
  instance_id from = 0;
  std::vector<uint8_t> payload;
};
ILLM_INSPECT(incoming_partials, x.from, x.payload)

// CAF serialization of the wire structs of actors/logic/attention_wire.hpp (the tests send them as messages).
ILLM_INSPECT(attend, x.tag, x.req_id, x.owner, x.layer, x.n_q, x.num_blocks, x.q, x.q_pos)
ILLM_INSPECT(partials, x.tag, x.ok, x.error, x.m, x.e, x.ma)

}  // namespace illm::actors
