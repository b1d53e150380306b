#pragma once
// The cluster as a status page draws it: the gManager's answer to (status_atom), read by a front end for
// GET /v1/cluster and GET /status. Every member with its pool, the members gone lately, the running requests
// with where their blocks are, and the latest moves (done or refused).

#include <caf/all.hpp>
#include <cstdint>
#include <string>
#include <vector>
#include "actors/messages/declarations.hpp"
#include "actors/messages/placement.hpp"
#include "actors/placement/types.hpp"

namespace illm::actors {

/// One member, or one that left or went down lately.
struct member_status {
  instance_id inst_id = 0;
  std::string state;   ///< "alive", "draining", "down" (silent, or gone: see reason) or "left"
  std::string node;    ///< the host it runs on (empty: the gManager's)
  std::string reason;  ///< down or left: why
  instance_stats stats;  ///< as its last heartbeat said
  uint32_t heard_ms_ago = 0;  ///< since its last heartbeat
};
ILLM_INSPECT(member_status, x.inst_id, x.state, x.node, x.reason, x.stats, x.heard_ms_ago)

/// A running request and where its KV blocks are: on its owner and on the holders of its other blocks.
struct request_status {
  request_id req_id = 0;
  instance_id owner = 0;
  std::vector<request_placement_entry> blocks;  ///< per instance that holds some (the owner's own: local)
};
ILLM_INSPECT(request_status, x.req_id, x.owner, x.blocks)

/// gManager -> front end: the cluster now.
struct cluster_status {
  uint64_t epoch = 0;    ///< the gManager's (cluster_view::epoch)
  uint64_t version = 0;  ///< its changes so far within the epoch (heartbeats, joins, rooms, moves reported)
  bool settled = true;   ///< false while a gManager that just started hears from the members
  std::vector<member_status> members;  ///< by id; then the members gone lately
  std::vector<request_status> requests;  ///< by id
  std::vector<move_report> moves;        ///< the latest reports, oldest first
  uint64_t moves_done = 0;     ///< reports of moves that were done, since the gManager started
  uint64_t moves_refused = 0;  ///< reports of moves refused or failed
};
ILLM_INSPECT(cluster_status, x.epoch, x.version, x.settled, x.members, x.requests, x.moves, x.moves_done,
             x.moves_refused)

}  // namespace illm::actors
