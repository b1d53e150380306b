#pragma once
// The remote-attention payloads and their wire format. An owner sends `attend` (its queries and the
// ids of blocks a holder keeps for it) and gets `partials` (m, e, MA per query row) back, through the
// transport's attend and partials channels; a holder may relay an attend to others on its node and merge
// their partials into its answer. The format is little-endian fields and raw arrays, with
// every length checked on decode: a malformed payload from a peer is an error, never a crash.

#include <cstdint>
#include <optional>
#include <string>
#include <span>
#include <vector>

#include "gpu/status.hpp"

namespace illm::actors {

/// Owner -> holder: MicroAttention of n_q queries over every block the holder keeps for req_id (the
/// holder knows which: only the queries travel, whatever the context length). From an instance that
/// prefills a chunk of another's request: over the blocks listed, which the holder keeps for that request
/// of `owner` (or which are the owner's own), once their layer is written (an earlier chunk may still be
/// computing them).
struct attend {
  uint64_t tag = 0;  ///< matches the answer to the request
  uint64_t req_id = 0;
  uint32_t owner = 0;
  int32_t layer = 0;
  int32_t n_q = 0;
  uint32_t num_blocks = 0;  ///< blocks the owner's table places there (checked by the holder)
  std::vector<float> q;     ///< [n_q][n_heads][head_dim]
  std::vector<int32_t> q_pos;
  std::vector<uint32_t> blocks;    ///< empty, or (for a chunk's queries) the physical blocks to attend
  std::vector<int32_t> block_pos;  ///< with blocks: the position of each one's first token
  /// Holders on the receiver's node that attend the same queries over the blocks listed for them: the
  /// receiver relays the queries to them over its node's links and answers with every partial merged into
  /// its own, so that the queries and partials cross the network once per node rather than once per holder.
  struct forward {
    uint32_t peer = 0;
    std::vector<uint32_t> blocks;
    std::vector<int32_t> block_pos;
  };
  std::vector<forward> forwards;
  /// Without blocks: the owner's logical blocks that its table places there, as (first, count) pairs whose
  /// counts add up to num_blocks (the holder attends exactly those, even while it still keeps a move that the
  /// owner gave up and has not yet taken back).
  std::vector<uint32_t> logical_runs;
};

/// Logical blocks as runs of (first, count) pairs, in logical order.
std::vector<uint32_t> logical_runs(std::vector<uint32_t> logical);
/// The (first, count) runs of the logical blocks whose first tokens are `block_pos` (blocks of 16 tokens).
std::vector<uint32_t> logical_runs_of(std::span<const int32_t> block_pos);

/// Holder -> owner: the partial (m, e, MA) per query row, or why there is none.
struct partials {
  uint64_t tag = 0;
  bool ok = false;
  std::string error;
  std::vector<float> m, e, ma;
};

/// Tags of a relay's own attends to the holders it forwards to (their partials go to its attention server,
/// not to its router): the top bit set.
constexpr uint64_t relay_tag_bit = uint64_t(1) << 63;

/// Merges partial `b` into `a` (same rows): per row, the larger m, the exp-sums and MA rescaled to it; a row
/// with an exp-sum of 0 (no keys seen) adds nothing. `head_dim` floats of MA per row.
void merge_partials(partials& a, const partials& b, int head_dim);

/// The tag of a partials payload, if it is one (a relay's router reads only this before handing it on).
std::optional<uint64_t> partials_tag(const std::vector<uint8_t>& bytes);

/// Whether an attend payload is a decode token's: one query row over the blocks kept for its request (none
/// named, nothing to relay). Anything else, a malformed payload included, is not.
bool is_decode_attend(const std::vector<uint8_t>& bytes);

/// Encodes for the transport.
std::vector<uint8_t> encode(const attend& a);
std::vector<uint8_t> encode(const partials& p);

/// Decodes a payload; a short, long or inconsistent one is a corrupt-payload error.
gpu::result<attend> decode_attend(const std::vector<uint8_t>& bytes);
gpu::result<partials> decode_partials(const std::vector<uint8_t>& bytes);

}  // namespace illm::actors
