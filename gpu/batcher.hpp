#pragma once
// Continuous batching over one engine: every step takes one decode token from each running sequence
// and fills the rest of the token budget with prefill chunks, first come first served. A sequence
// keeps every token it has (prompt and generated), so it can always be rebuilt: when blocks run out,
// the newest sequence is preempted by recompute (its blocks freed, its KV computed again later).

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "gpu/engine.hpp"

namespace illm::gpu {

/// Why a sequence stopped.
enum class finish_reason { none, length, stop, error };
const char* to_string(finish_reason r);

/// A request as the engine sees it.
struct sequence {
  uint64_t id = 0;
  std::vector<int32_t> tokens;  ///< prompt, then generated tokens
  int n_prompt = 0;
  int n_cached = 0;             ///< tokens whose KV is in the table
  block_table table;
  sampling_params sampling;
  uint64_t rng = 0;             ///< sampling stream state (the seed at start)
  int max_new_tokens = 0;
  bool ignore_eos = false;      ///< keep going past BOS and EOS
  finish_reason finish = finish_reason::none;
  std::string error;            ///< why, when finish is error
  int preemptions = 0;
  std::vector<int> partials_per_layer;  ///< pools its attention merged, per step (for reports)

  int n_generated() const { return int(tokens.size()) - n_prompt; }
  bool finished() const { return finish != finish_reason::none; }
};

/// Hands out blocks for sequences' new tokens and takes them back.
class block_source {
 public:
  virtual ~block_source() = default;
  /// A block for logical block `index` of `seq`; out_of_blocks when none is free.
  virtual result<block_ref> allocate(const sequence& seq, uint32_t index) = 0;
  virtual status release(const block_ref& ref) = 0;
};

/// Limits of a batcher.
struct batcher_options {
  int max_batch_tokens = 512;  ///< token budget per step
  int max_batch_seqs = 256;    ///< sequences per step
};

/// Runs sequences to completion on an engine, one step at a time.
class batcher {
 public:
  batcher(engine& e, block_source& blocks, const batcher_options& options);

  /// Queues a sequence; it runs from the next step on.
  void add(std::shared_ptr<sequence> seq);
  /// One step: plan, allocate blocks, run the engine, sample, retire finished sequences.
  status step(const kv_pools& pools, attention_router* router);
  /// True when no sequence is waiting or running.
  bool idle() const { return active_.empty(); }
  /// Sequences that finished since the last call.
  std::vector<std::shared_ptr<sequence>> take_finished();

  /// Tokens processed by the last step (prefill and decode), and how many were decode tokens.
  int last_step_tokens() const { return last_tokens_; }
  int last_step_decodes() const { return last_decodes_; }

 private:
  struct planned {
    sequence* seq;
    int n_tokens;
  };
  std::vector<planned> plan() const;
  /// Gives every planned sequence the blocks its tokens need, preempting the newest when short.
  status reserve_blocks(std::vector<planned>& batch);
  status release_all(sequence& seq);
  void preempt(sequence& seq);
  void finish(sequence& seq, finish_reason why, std::string error = {});
  void retire();

  engine& engine_;
  block_source& blocks_;
  batcher_options options_;
  std::deque<std::shared_ptr<sequence>> active_;  // admission order: oldest first
  std::vector<std::shared_ptr<sequence>> finished_;
  int last_tokens_ = 0, last_decodes_ = 0;
};

}  // namespace illm::gpu
