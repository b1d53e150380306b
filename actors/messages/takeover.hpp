#pragma once
// Owner takeover: a request whose owner died goes on at a new owner without computing again the blocks that
// survived it. The front end hands the request (prompt and tokens so far) to a new owner, naming the old one
// and a takeover generation (generate_request::takeover_owner, takeover_generation). The new owner's instance
// asks its rManager to take the request's blocks over (take_over): the rManager asks every member what it
// keeps for (old owner, request) (report_orphan), chooses the longest prefix of logical blocks that survived
// (a primary, else a copy), and has each holder hand them to the new owner (adopt_orphan: primaries kept,
// copies promoted, the rest of the request freed there). A holder refuses a generation older than one it
// adopted for, so an old owner that was only slow cannot read or release the blocks any more. Holders keep a
// departed owner's blocks for a lease (orphan_lease_ms) before they free them.
#include <caf/all.hpp>
#include <cstdint>
#include <string>
#include <vector>
#include "actors/messages/declarations.hpp"
#include "actors/placement/types.hpp"

namespace illm::actors {

/// new owner's instance -> its rManager: take the blocks of req_id that `old_owner` had elsewhere over, up to
/// max_blocks logical blocks from the first (answer: taken_over).
struct take_over {
  request_id req_id = 0;
  instance_id old_owner = 0;
  uint32_t generation = 0;
  uint32_t max_blocks = 0;
};
ILLM_INSPECT(take_over, x.req_id, x.old_owner, x.generation, x.max_blocks)

/// The answer to take_over: logical blocks 0..n-1 of the request, each at `holders[i]` as block `physical[i]`,
/// owned by the new owner now (none: everything is computed again).
struct taken_over {
  std::vector<instance_id> holders;
  std::vector<uint32_t> physical;
  std::string reason;  ///< why fewer blocks than asked for survived, when a holder refused or failed
  uint32_t promoted = 0;  ///< how many of them were copies (replicas) promoted; the others were primaries kept
};
ILLM_INSPECT(taken_over, x.holders, x.physical, x.reason, x.promoted)

/// new owner's rManager -> a member's rManager: what do you keep for req_id of `owner` (answer: orphan_report)?
struct report_orphan {
  request_id req_id = 0;
  instance_id owner = 0;
};
ILLM_INSPECT(report_orphan, x.req_id, x.owner)

/// The answer to report_orphan: the logical blocks kept as the blocks the request reads, those kept as copies, and
/// whether blocks are promised to its room here.
struct orphan_report {
  std::vector<uint32_t> primary;
  std::vector<uint32_t> copies;
  bool room = false;
};
ILLM_INSPECT(orphan_report, x.primary, x.copies, x.room)

/// new owner's rManager -> a holder's rManager: req_id of old_owner is new_owner's now, as of `generation`:
/// keep the primaries at `keep` and promote the copies at `promote` for it, and free the rest of the request
/// (answer: orphan_adopted).
struct adopt_orphan {
  request_id req_id = 0;
  instance_id old_owner = 0;
  instance_id new_owner = 0;
  uint32_t generation = 0;
  std::vector<uint32_t> keep;
  std::vector<uint32_t> promote;
};
ILLM_INSPECT(adopt_orphan, x.req_id, x.old_owner, x.new_owner, x.generation, x.keep, x.promote)

/// The answer to adopt_orphan: all of them handed over (the physical blocks of keep, then of promote), or none.
struct orphan_adopted {
  bool ok = false;
  std::string reason;
  std::vector<uint32_t> physical;
};
ILLM_INSPECT(orphan_adopted, x.ok, x.reason, x.physical)

}  // namespace illm::actors
