#pragma once
// The cluster-wide prefix cache (--prefix-cache cluster). Each rManager reports its pool's cache changes in its
// heartbeats (gpu::prefix_changes: keys added and removed since the report before, or every key after one was
// lost); the gManager keeps them as an index of which member holds which block keys (soft state, rebuilt from the
// reports after a restart, like the rest of its view). A new request's instance asks its rManager for the prompt's
// longest prefix held elsewhere (find_prefix); the rManager asks the gManager's index who holds it (prefix_lookup)
// and the holder to attach it for the request (read_prefix): the holder keeps the cached blocks where they are as
// hosted blocks of (owner, request), one reader more each, and answers the request's attends over them like any
// hosted block, until the owner releases the request there. No KV moves.
#include <caf/all.hpp>
#include <cstdint>
#include <vector>
#include "actors/messages/declarations.hpp"
#include "actors/placement/prefix_index.hpp"
#include "actors/placement/types.hpp"
#include "gpu/block_key.hpp"
#include "gpu/prefix_cache.hpp"

namespace illm::gpu {
// CAF serialization of the cache's types that these messages carry.
ILLM_INSPECT(block_key, x.words)
ILLM_INSPECT(kv_identity, x.model, x.kv_type)
ILLM_INSPECT(keyed_block, x.pool, x.block, x.index, x.key, x.parent, x.tokens)
ILLM_INSPECT(prefix_changes, x.full, x.added, x.removed)
}  // namespace illm::gpu

namespace illm::actors::placement {
ILLM_INSPECT(prefix_segment, x.holder, x.first, x.count)
}  // namespace illm::actors::placement

namespace illm::actors {

/// rManager -> gManager: which members hold how many of a chain's first blocks (answer: prefix_holders)?
struct prefix_lookup {
  std::vector<gpu::block_key> keys;
};
ILLM_INSPECT(prefix_lookup, x.keys)

/// The answer to prefix_lookup, as the members' reports have it (each holder checks the keys again): each member
/// whose cache holds the chain's first block, with how many of the chain's first blocks it holds; and the longest
/// prefix all caches hold between them, in runs held by one member each (placement::prefix_index::cover).
struct prefix_holders {
  std::vector<instance_id> holders;
  std::vector<uint32_t> blocks;
  std::vector<placement::prefix_segment> cover;
};
ILLM_INSPECT(prefix_holders, x.holders, x.blocks, x.cover)

/// instance -> its rManager: attach the longest prefix of request req_id's prompt that another member's cache
/// holds, if it is longer than `more_than` blocks (answer: taken_over, the blocks read where they are, held
/// for the request there; none when no member holds more).
struct find_prefix {
  request_id req_id = 0;
  gpu::block_key root;                ///< the chain's start (the model's, scoped to the request's namespace)
  std::vector<gpu::block_key> keys;   ///< of the prompt's full blocks, chained from root
  std::vector<int32_t> tokens;        ///< those blocks' tokens (keys.size() * 16)
  uint32_t more_than = 0;             ///< blocks the instance's own cache holds
  uint32_t decode_tokens = 0;         ///< the new tokens the request may generate: the steps that attend the prefix
  bool found = false;     ///< the front end looked the keys up when it routed the request: the index is not asked
  prefix_holders holders;  ///< ... and what the index answered then
  /// Members whose attention failed for the request as it starts over: read elsewhere, however fresh the index's
  /// word on them (this rManager may not have heard of their failure yet).
  std::vector<instance_id> avoid;
};
ILLM_INSPECT(find_prefix, x.req_id, x.root, x.keys, x.tokens, x.more_than, x.decode_tokens, x.found, x.holders,
             x.avoid)

/// owner's rManager -> a holder's rManager: attach the longest cached run of a chain's blocks for (owner, req_id),
/// read where it is (answer: prefix_read): `keys` are blocks first, first + 1, ... of the request, `root` the key of
/// the block before them (the chain's root when first is 0).
struct read_prefix {
  request_id req_id = 0;
  instance_id owner = 0;
  gpu::block_key root;
  std::vector<gpu::block_key> keys;
  std::vector<int32_t> tokens;
  uint32_t first = 0;
  gpu::kv_identity kv;  ///< the owner's pool's: a holder of another model's or type's KV reads nothing for it
};
ILLM_INSPECT(read_prefix, x.req_id, x.owner, x.root, x.keys, x.tokens, x.first, x.kv)

/// reader's rManager -> a holder's rManager: copy the longest cached run of a chain's blocks (as read_prefix names
/// them) into the reader's pool, from memory nobody there needs, where the reader's cache takes them (answer:
/// replica_result, once the reader committed the copy): the performance model found the copy cheaper than reading
/// them in place. Move `id` is the reader's; the holder's cache keeps its blocks.
struct copy_prefix {
  move_id id = 0;
  request_id req_id = 0;
  instance_id reader = 0;
  gpu::block_key root;
  std::vector<gpu::block_key> keys;
  std::vector<int32_t> tokens;
  gpu::kv_identity kv;  ///< the reader's pool's: a holder of another model's or type's KV refuses the copy
};
ILLM_INSPECT(copy_prefix, x.id, x.req_id, x.reader, x.root, x.keys, x.tokens, x.kv)

/// The answer to read_prefix: the holder's physical blocks of the run's first physical.size() blocks, hosted for
/// (owner, req_id) at logical places first, first + 1, ... until the owner releases the request there.
struct prefix_read {
  std::vector<uint32_t> physical;
};
ILLM_INSPECT(prefix_read, x.physical)

}  // namespace illm::actors
