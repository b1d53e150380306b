#pragma once
// The seam of DistAttention: the engine computes MicroAttention over the blocks in its own pool and
// asks an attention_router for the partials of blocks that other pools hold, then merges them all.

#include <cstdint>
#include <span>
#include <vector>

#include "gpu/status.hpp"

namespace illm::gpu {

/// One remote MicroAttention: the queries of one sequence for one layer against the blocks that one
/// holder keeps. Pointers are host memory; the router writes the outputs before finish() returns.
struct remote_attention_job {
  uint64_t seq_id = 0;
  int layer = 0;
  uint32_t holder = 0;                  ///< pool id of the instance holding the blocks
  std::span<const uint32_t> blocks;     ///< physical block ids in the holder's pool
  std::span<const int32_t> block_pos;   ///< position of each block's first token
  const float* q = nullptr;             ///< [n_q][n_heads][head_dim], token rows q_ld apart
  size_t q_ld = 0;
  const int32_t* q_pos = nullptr;       ///< [n_q]
  int n_q = 0;
  float* m = nullptr;                   ///< out [n_q][n_heads]
  float* e = nullptr;                   ///< out [n_q][n_heads]
  float* ma = nullptr;                  ///< out [n_q][n_heads][head_dim]
  /// Nonzero: the queries are of a chunk computed here for that request of instance foreign_owner, whose
  /// blocks the holder keeps for the owner (or are the owner's own); the holder is told the blocks to read.
  uint64_t foreign_request = 0;
  uint32_t foreign_owner = 0;
};

/// A sequence whose remote attention failed, and the holder it failed at.
struct failed_attention {
  uint64_t seq = 0;
  uint32_t holder = 0;
  auto operator<=>(const failed_attention&) const = default;
};

/// Delivers remote MicroAttention jobs to the holders of the blocks and collects their partials. A step
/// may keep two rounds of jobs in flight, one per lane (the engine's two micro-batches): while the holders
/// attend one lane's queries, the engine runs the other lane's dense layers.
class attention_router {
 public:
  /// Rounds a router keeps in flight at once.
  static constexpr int lanes = 2;

  virtual ~attention_router() = default;
  /// Starts every job of one layer of `lane` (0 or 1, its previous round finished); returns without
  /// waiting where holders are remote. The queries are read before begin() returns.
  virtual status begin(int lane, std::span<const remote_attention_job> jobs) = 0;
  /// Waits until every job of `lane`'s last begin() has written its outputs.
  virtual status finish(int lane) = 0;
  /// Drops every round still in flight (a step that failed left it): later answers write nothing.
  virtual void cancel() {}
  /// The sequences whose remote attention failed since the last call (their holder died, did not answer
  /// in time, or could not attend them), with the holders it failed at, each pair once. A step that failed
  /// for them alone can run again without them.
  virtual std::vector<failed_attention> take_failed() { return {}; }
};

}  // namespace illm::gpu
