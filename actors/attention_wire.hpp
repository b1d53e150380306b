#pragma once
// The remote-attention payloads and their wire format. An owner sends `attend` (its queries and the
// ids of blocks a holder keeps for it) and gets `partials` (m, e, MA per query row) back, through the
// transport's attend and partials channels. The format is little-endian fields and raw arrays, with
// every length checked on decode: a malformed payload from a peer is an error, never a crash.

#include <cstdint>
#include <string>
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
};

/// Holder -> owner: the partial (m, e, MA) per query row, or why there is none.
struct partials {
  uint64_t tag = 0;
  bool ok = false;
  std::string error;
  std::vector<float> m, e, ma;
};

/// Encodes for the transport.
std::vector<uint8_t> encode(const attend& a);
std::vector<uint8_t> encode(const partials& p);

/// Decodes a payload; a short, long or inconsistent one is a corrupt-payload error.
gpu::result<attend> decode_attend(const std::vector<uint8_t>& bytes);
gpu::result<partials> decode_partials(const std::vector<uint8_t>& bytes);

}  // namespace illm::actors
