#pragma once
// Room prefill: a long prompt prefilled by its room's holders, where its KV stays.
//
//
// The owner hands its prompt out in chunks, each to a holder of its room: the owner's rManager reserves the
// chunk's blocks there (a move's reservation, taken from the room's promise), the holder's instance computes
// the chunk into them as part of its own steps, attending the blocks before it wherever they are (those of
// chunks still being computed elsewhere once their layer is written: kv_pool::mark_written), and the owner
// commits them as hosted blocks of its request. A chunk goes out only once the step computing the one
// before it has started, so every step waits only for steps that started before it.

#include <caf/all.hpp>
#include <cstdint>
#include <string>
#include <vector>
#include "actors/messages/declarations.hpp"
#include "actors/placement/types.hpp"

namespace illm::actors {

/// owner instance -> its rManager: reserve num_blocks at `holder` for a chunk of req_id that the holder will
/// compute (answer: move_reservation, granted or refused).
struct reserve_chunk {
  move_id id = 0;  ///< names the chunk from now on
  request_id req_id = 0;
  instance_id holder = 0;   ///< the instance that will compute it and keep its blocks
  uint32_t num_blocks = 0;  ///< the chunk's
};
ILLM_INSPECT(reserve_chunk, x.id, x.req_id, x.holder, x.num_blocks)

/// owner instance -> holder instance: compute the KV of positions [pos0, pos0 + tokens.size()) of req_id into
/// the blocks that move `id` reserved there, the blocks before them being where the table places them
/// (answer: chunk_done once that KV is written, or why not).
struct prefill_chunk {
  move_id id = 0;
  instance_id owner = 0;
  request_id req_id = 0;
  int32_t pos0 = 0;
  std::vector<int32_t> tokens;
  std::vector<uint32_t> table_pools;   ///< per logical block of [0, pos0 + tokens.size()): its instance
  std::vector<uint32_t> table_blocks;  ///< ... and its physical block there
  instance_actor owner_instance;       ///< the owner's instance, which hears chunk_started
};
ILLM_INSPECT(prefill_chunk, x.id, x.owner, x.req_id, x.pos0, x.tokens, x.table_pools, x.table_blocks, x.owner_instance)

// chunk_started, a move_notice (declarations.hpp): holder instance -> owner instance: the step computing chunk `id` has
// started; the next chunk may go.

// chunk_done, a move_outcome (declarations.hpp): the answer to prefill_chunk.

/// owner instance -> its rManager: chunk `id` of req_id is written: commit its blocks at their holder as these
/// logical blocks of the request (answer: bool, whether the holder committed them).
struct commit_chunk {
  move_id id = 0;
  request_id req_id = 0;
  std::vector<uint32_t> logical;  ///< one per reserved block, in the reservation's order
};
ILLM_INSPECT(commit_chunk, x.id, x.req_id, x.logical)

// abort_chunk, a move_notice (declarations.hpp): owner instance -> its rManager: give chunk `id`'s reservation back
// (its request starts over or ended).

/// holder instance -> its rManager: chunk `id` of (owner, req_id) is being computed here: its reservation does
/// not expire nor go back until return_reservation (answer: its blocks; none when there is no such reservation).
struct take_reservation {
  move_id id = 0;
  instance_id owner = 0;
  request_id req_id = 0;
};
ILLM_INSPECT(take_reservation, x.id, x.owner, x.req_id)

// return_reservation, a move_notice (declarations.hpp): holder instance -> its rManager: chunk `id` ended here
// (written, failed or cancelled): its reservation waits for the owner's commit for a lease again, or goes back now if
// it was aborted meanwhile.

// cancel_chunk, a move_notice (declarations.hpp): holder rManager -> its instance: stop computing chunk `id` (its
// request ended, or the owner gave it up).

}  // namespace illm::actors
