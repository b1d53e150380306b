#pragma once
// Admission, the decisions (plain C++, no CAF): whether the request first in an instance's queue starts
// now, waits, or is refused, and what the instance asks for meanwhile (a room elsewhere, a loan of its
// running requests' blocks). The instance actor (actors/instance/admission.cpp) gathers the facts from its
// pool, batch and view, and carries the decision out; a new admission policy is a new function here.

#include <algorithm>
#include <cstdint>
#include <optional>

#include "gpu/kv_pool.hpp"

namespace illm::actors::admission {

/// What becomes of the request first in the queue.
enum class verdict { admit, wait, refuse };

/// Blocks a request needs for its prompt and all its tokens.
inline uint32_t blocks_needed(size_t prompt_tokens, int32_t max_tokens) {
  return gpu::blocks_for_tokens(int64_t(prompt_tokens) + max_tokens);
}

/// The fewest blocks a request with a room keeps on its own instance: two prefill chunks (or half the pool
/// when chunks are that large), for its newest blocks.
inline uint32_t working_set(int32_t max_batch_tokens, uint32_t pool_blocks) {
  return std::min(2 * gpu::blocks_for_tokens(max_batch_tokens), pool_blocks / 2);
}

/// The pool as a new request sees it.
struct pool_facts {
  uint32_t total = 0;          ///< blocks in the pool
  uint32_t free = 0;           ///< free now
  uint32_t promised = 0;       ///< free, but spoken for by running requests as they grow
  uint32_t held_for_room = 0;  ///< kept free for another instance's long request waiting for its room
  uint32_t rooms = 0;          ///< free, but promised to others' rooms
  bool rooms_overdrawn = false;  ///< rooms are promised more than is free beside the running requests
  bool tracks_rooms = false;     ///< rooms' promises are known here (else `rooms` is not counted)
};

/// Free blocks a new request needing `need` blocks may take here. Blocks promised to others' rooms stay free
/// until their moves come: a request that fits here whole may use them meanwhile (it ends; the room fills over
/// a long prefill), unless a room already waits for them; other requests (a long one's part here) may not.
/// Blocks held back for a room still waiting are not for new requests either, except the one whose room was
/// granted before it (`granted`).
uint32_t blocks_for_new(const pool_facts& pool, uint32_t need, bool granted);

/// Everything the decision about the queue's head depends on.
struct head_facts {
  uint32_t need = 0;          ///< blocks it needs in all
  uint32_t capacity = 0;      ///< the cluster's blocks (the pool's without lending)
  uint32_t pool_total = 0;    ///< this pool's blocks
  uint32_t fits_here = 0;     ///< blocks_for_new for it
  uint32_t working_set = 0;   ///< the fewest blocks a request with a room keeps here
  bool lending = true;        ///< blocks may live on other instances (false: static-multi)
  bool view_newer = false;    ///< a cluster view newer than the request has arrived
  bool room_granted = false;  ///< its room is granted
  uint32_t room_keep = 0;     ///< ... and it keeps this many blocks here
  bool room_too_big = false;  ///< its room (all but a working set) was refused: it asks to keep more here
  bool idle = false;          ///< nothing runs here
  bool rooms_running = false; ///< a running request here has a room (the pool is a long request's)
};

/// A room the instance asks the gManager for: blocks elsewhere for all of the request but `keep` here.
struct room_ask {
  uint32_t need = 0;
  uint32_t keep = 0;
};

/// The decision, and what to ask for while the request waits.
struct decision {
  verdict what = verdict::wait;
  std::optional<room_ask> room;            ///< ask for a room
  std::optional<uint32_t> loan_blocks;     ///< lend this many blocks of running requests to others
};

/// Whether the request at the head of the queue starts now. Without lending it needs room for all its tokens
/// in this pool; when it does not fit but others have room, a loan moves blocks of running requests out, and
/// it starts once they have. A request longer than the pool needs a room: blocks the gManager keeps for it
/// elsewhere, where its blocks move as it grows; so does one that does not fit what is free while nothing runs
/// here. Refused: without lending, a request longer than the pool; with it, one longer than the cluster (as a
/// view newer than the request shows: members may have joined).
decision judge_head(const head_facts& head);

/// Blocks a long head waiting for its room keeps here when it starts (0: the head fits the pool, or none).
uint32_t head_keeps(uint32_t head_need, uint32_t pool_total, bool room_granted, uint32_t room_keep,
                    uint32_t working_set);

/// Whether a request queued behind a head that waits for its room starts now (backfill): it fits here whole
/// and leaves the `keep` blocks the head keeps here when its room comes.
bool may_backfill(uint32_t need, uint32_t pool_total, uint32_t keep, uint32_t fits_here);

}  // namespace illm::actors::admission
