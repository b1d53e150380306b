#pragma once
// Generation in one process: one engine, the request's KV blocks kept in K pools (each its own arena)
// spread by a seeded shuffle, each layer's attention computed as one partial per pool and merged.
// This is the DistAttention path without a network: pool 0 is local, the others answer through a
// pool_router as remote holders would.

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/batcher.hpp"
#include "gpu/model_files.hpp"

namespace illm::gpu {

/// Spreads each sequence's blocks over pools: every K consecutive logical blocks go to a fresh
/// seeded permutation of the K pools. A full pool passes the block to the next one.
class spread_block_source final : public block_source {
 public:
  spread_block_source(std::vector<kv_pool*> pools, uint64_t seed);
  result<block_ref> allocate(const sequence& seq, uint32_t index) override;
  status release(const block_ref& ref) override;
  /// The pool a sequence's logical block goes to first.
  uint32_t preferred_pool(uint64_t seq_id, uint32_t index) const;
  /// The most blocks each pool has had in use at once.
  const std::vector<uint32_t>& peak_used() const { return peak_used_; }

 private:
  std::vector<kv_pool*> pools_;
  uint64_t seed_;
  std::vector<uint32_t> peak_used_;
};

/// What to generate.
struct generate_options {
  std::vector<int32_t> prompt_ids;  ///< BOS first
  int max_tokens = 64;
  sampling_params sampling;
  uint64_t seed = 0;
  bool ignore_eos = false;
  std::vector<int32_t> stop_ids{token_bos, token_eos};  ///< the model's end ids
  int kv_pools = 1;
  uint32_t blocks_per_pool = 0;  ///< 0: enough for the prompt plus max_tokens
  int max_batch_tokens = 512;    ///< prefill chunk
  dtype kv_type = dtype::f32;    ///< the pools' element type
};

/// What came out, with the figures `illm generate` reports.
struct generate_result {
  std::vector<int32_t> token_ids;          ///< generated ids only
  finish_reason finish = finish_reason::none;
  std::vector<uint32_t> blocks_per_pool;   ///< the request's blocks in each pool (at its longest)
  int partials_per_layer = 0;              ///< partials merged per layer at the last step
  double prefill_s = 0, decode_s = 0;      ///< time to the first token; time for the rest
  uint64_t query_bytes = 0, partial_bytes = 0;  ///< DistAttention traffic between pools
};

/// Runs one request to its end on `device`.
result<generate_result> generate(const loaded_model& model, backend& device, const generate_options& options);

}  // namespace illm::gpu
