#pragma once
// Rooms: blocks on other instances promised to a request longer than its instance can hold, asked of the
// gManager and kept by the holders until the request's blocks move in or it ends.

#include <caf/all.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>
#include "actors/placement/types.hpp"

namespace illm::actors {

/// instance -> rManager -> gManager: keep num_blocks spare blocks on other instances for a request longer
/// than this instance can hold (a room), so that it can start; its blocks move there as it grows.
struct reserve_room {
  instance_id owner = 0;
  request_id req_id = 0;
  uint32_t num_blocks = 0;
};

/// gManager -> rManager -> instance: the room, as blocks to keep per holder, or why there is none now. The
/// owner's rManager has each holder keep them (keep_blocks) before the instance hears that it may start.
struct room_answer {
  request_id req_id = 0;
  bool granted = false;
  std::string reason;
  std::vector<std::pair<instance_id, uint32_t>> holders;
};

/// owner's rManager -> a holder's rManager: promise num_blocks to (owner, req) until its blocks move in (a
/// room's moves may have them; nobody else's may) or it ends (release_blocks). The blocks stay in the pool
/// meanwhile (actors/room_promises.hpp). Answer: the blocks promised, all or none.
struct keep_blocks {
  instance_id owner = 0;
  request_id req_id = 0;
  uint32_t num_blocks = 0;
};

/// rManager -> gManager: the request ended; its room (what is left of it) is free again.
struct release_room {
  instance_id owner = 0;
  request_id req_id = 0;
};

// ---- inspect overloads (CAF serialization) ---

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, reserve_room& x) {
  return f(caf::meta::type_name("reserve_room"), x.owner, x.req_id, x.num_blocks);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, room_answer& x) {
  return f(caf::meta::type_name("room_answer"), x.req_id, x.granted, x.reason, x.holders);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, keep_blocks& x) {
  return f(caf::meta::type_name("keep_blocks"), x.owner, x.req_id, x.num_blocks);
}
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, release_room& x) {
  return f(caf::meta::type_name("release_room"), x.owner, x.req_id);
}

}  // namespace illm::actors
