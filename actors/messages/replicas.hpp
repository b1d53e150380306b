#pragma once
// Replicas: second copies of a long request's full blocks, made in the background from free memory and
// given up first when memory is needed. The owner's rManager asks its instance which blocks lack a copy
// (pick_replicas), asks their holder to copy them to another instance (replicate_blocks: a try_move_kvcache
// and a commit_move marked as replicas there), and tells the instance where the copies are
// (blocks_replicated). An instance that gives copies up (their memory was taken) tells the owner
// (replicas_lost). Its pool tells its rManager which spare blocks it took (spare_reclaimed). When a holder
// fails, the owner has the copies of its blocks promoted where they are (promote_replicas).

#include <caf/all.hpp>
#include <cstdint>
#include <string>
#include <vector>
#include "actors/messages/declarations.hpp"
#include "actors/placement/types.hpp"

namespace illm::actors {

/// rManager -> instance: choose up to max_blocks full blocks without a copy of a request of at least min_tokens
/// tokens, all at one holder (answer: block_pick, with that holder; marked as moving until the copy ends).
struct pick_replicas {
  move_id id = 0;
  uint32_t min_tokens = 0;
  uint32_t max_blocks = 0;
};
ILLM_INSPECT(pick_replicas, x.id, x.min_tokens, x.max_blocks)

/// owner's rManager -> the holder's rManager (the owner's own for its local blocks): copy these blocks of
/// req_id (physical at the holder, at these logical places) to dst as a replica (answer: replica_result).
struct replicate_blocks {
  move_id id = 0;
  request_id req_id = 0;
  instance_id owner = 0;
  std::vector<uint32_t> logical;
  std::vector<uint32_t> physical;
  instance_id dst = 0;
};
ILLM_INSPECT(replicate_blocks, x.id, x.req_id, x.owner, x.logical, x.physical, x.dst)

// replica_result, a move_outcome (declarations.hpp): the answer to replicate_blocks: the copy is committed at its
// destination, or why not.

/// rManager -> instance: logical blocks of req_id have a copy at `at` now (answer: false when the request is
/// gone or its blocks changed meanwhile: the copy is given back).
struct blocks_replicated {
  move_id id = 0;
  request_id req_id = 0;
  instance_id at = 0;
  std::vector<uint32_t> logical;
};
ILLM_INSPECT(blocks_replicated, x.id, x.req_id, x.at, x.logical)

/// A replica's holder -> the owner's rManager -> its instance: these copies are gone (their memory was taken).
struct replicas_lost {
  request_id req_id = 0;
  instance_id owner = 0;
  instance_id at = 0;
  std::vector<uint32_t> logical;
};
ILLM_INSPECT(replicas_lost, x.req_id, x.owner, x.at, x.logical)

/// instance -> its rManager -> the replicas' holders: make these copies of req_id's logical blocks (kept at `at`,
/// one per block) the blocks it reads, where they are, because their holder failed (answer: replicas_promoted).
struct promote_replicas {
  request_id req_id = 0;
  instance_id owner = 0;
  std::vector<uint32_t> logical;
  std::vector<instance_id> at;
};
ILLM_INSPECT(promote_replicas, x.req_id, x.owner, x.logical, x.at)

/// The answer to promote_replicas: all of them promoted (their physical blocks, in order), or none.
struct replicas_promoted {
  bool ok = false;
  std::string reason;
  std::vector<uint32_t> blocks;
};
ILLM_INSPECT(replicas_promoted, x.ok, x.reason, x.blocks)

/// The pool -> its rManager: allocations took these spare blocks (block, generation), replicas no more.
struct spare_reclaimed {
  std::vector<uint32_t> blocks;
  std::vector<uint64_t> generations;
};
ILLM_INSPECT(spare_reclaimed, x.blocks, x.generations)

}  // namespace illm::actors
