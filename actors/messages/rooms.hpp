#pragma once
// Rooms: blocks on other instances promised to a request longer than its instance can hold, asked of the
// gManager and kept by the holders until the request's blocks move in or it ends.

#include <caf/all.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>
#include "actors/messages/declarations.hpp"
#include "actors/placement/types.hpp"

namespace illm::actors {

/// instance -> rManager -> gManager: keep num_blocks spare blocks on other instances for a request longer
/// than this instance can hold (a room), so that it can start; its blocks move there as it grows.
struct reserve_room {
  instance_id owner = 0;
  request_id req_id = 0;
  uint32_t num_blocks = 0;  ///< in all, over the other instances
};
ILLM_INSPECT(reserve_room, x.owner, x.req_id, x.num_blocks)

/// gManager -> rManager -> instance: the room, as blocks to keep per holder, or why there is none now. The
/// owner's rManager has each holder keep them (keep_blocks) before the instance hears that it may start.
struct room_answer {
  request_id req_id = 0;
  bool granted = false;
  std::string reason;
  std::vector<std::pair<instance_id, uint32_t>> holders;
};
ILLM_INSPECT(room_answer, x.req_id, x.granted, x.reason, x.holders)

/// owner's rManager -> a holder's rManager: promise num_blocks to (owner, req) until its blocks move in (a
/// room's moves may have them; nobody else's may) or it ends (release_blocks). The blocks stay in the pool
/// meanwhile (actors/logic/pool_promises.hpp). Answer: the blocks promised, all or none.
struct keep_blocks {
  instance_id owner = 0;
  request_id req_id = 0;
  uint32_t num_blocks = 0;  ///< at this holder
};
ILLM_INSPECT(keep_blocks, x.owner, x.req_id, x.num_blocks)

/// rManager -> gManager: the request ended; its room (what is left of it) is free again.
struct release_room {
  instance_id owner = 0;
  request_id req_id = 0;
};
ILLM_INSPECT(release_room, x.owner, x.req_id)

}  // namespace illm::actors
