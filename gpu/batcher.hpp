#pragma once
// Continuous batching over one engine: every step takes one decode token from each running sequence,
// then the chunks it computes for other instances' requests (each whole), and fills the rest of the
// token budget with prefill chunks, first come first served (a step with decode tokens up to a smaller
// budget, when one is set, so that prompts spread over the decode steps; or, when set, prefill chunks only every
// few steps, so that most steps are decode alone). A sequence
// keeps every token it has (prompt and generated), so it can always be rebuilt: when blocks run out,
// the newest sequence is preempted by recompute (its blocks freed, its KV computed again later), or,
// where the caller can find blocks elsewhere, the short sequence waits for them.
//
// A step is planned (plan), run on the engine (by whoever owns it), then completed (complete) with
// the sampled tokens; step() does all three in place.

#include <cstdint>
#include <algorithm>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "gpu/block_key.hpp"
#include "gpu/engine.hpp"
#include "gpu/tokenizer.hpp"

namespace illm::gpu {

/// Why a sequence stopped.
enum class finish_reason { none, length, stop, cancelled, error };
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
  /// Tokens at the end of the prompt that an earlier owner generated (the request went on here): penalties and
  /// min_tokens count them as output.
  int output_before = 0;
  /// Per generated token, its log probabilities (when sampling.logprobs asks for them).
  std::vector<token_logprobs> logprobs;
  /// The prompt's log probabilities with this many alternatives are computed as it is prefilled (-1: none).
  int prompt_logprobs = -1;
  /// With prompt_logprobs: per prompt position, the log probabilities of its token given those before (the first
  /// position's empty).
  std::vector<token_logprobs> prompt_scores;
  /// With sampling.constraint: where its output stands in the grammar (its output so far read).
  grammar::match_state constraint_state;
  int max_new_tokens = 0;
  bool ignore_eos = false;      ///< keep going past the stop ids
  /// Ids that end it when sampled (the model's end ids; llama2.c's BOS and EOS unless told).
  std::vector<int32_t> stop_ids{token_bos, token_eos};
  finish_reason finish = finish_reason::none;
  std::string error;            ///< why, when finish is error
  int preemptions = 0;
  int partials_per_layer = 0;   ///< pools its attention merged at its last step
  /// Nonzero: this sequence is a chunk of that request of instance foreign_owner, prefilled here into blocks
  /// reserved for it (the table is theirs, not this batcher's): its tokens before n_cached are placeholders,
  /// it samples nothing, runs whole in one step, ends once every token has KV, is never preempted, and
  /// releases no block when it ends.
  uint64_t foreign_request = 0;
  uint32_t foreign_owner = 0;
  /// Sits out every step (its prompt is being prefilled elsewhere meanwhile) and is never preempted.
  bool held = false;
  /// Full logical blocks past n_cached whose KV the table holds already, ascending: blocks kept when KV before
  /// them was lost. Prefill computes the positions between them and steps over them.
  std::vector<uint32_t> kept_ahead;
  /// Positions below this had KV computed once and lost it (set by whoever saw the loss): computing them again
  /// is counted in recomputed.
  int lost_below = 0;
  int recomputed = 0;  ///< positions computed again after their KV was lost
  /// Prompt tokens whose KV its first start found in the prefix cache (reported as cached tokens).
  int cached_prompt_tokens = 0;
  bool prefix_looked_up = false;  ///< whether a start of it has looked in the prefix cache
  bool wants_prefix = false;      ///< its next plan looks in the prefix cache (it starts, or starts over)
  /// Full blocks, from the first, whose content keys the block source has taken (offered to its prefix cache),
  /// and the key of the last of them.
  uint32_t keyed_blocks = 0;
  block_key last_key;
  /// The prefix cache's namespace of its blocks (generate_params::cache_scope; empty: the shared one).
  std::string cache_scope;
  /// Set as it finishes, by a block source with a prefix cache: its full blocks that other pools hold, keyed (their
  /// holders' caches may keep them once it ends).
  std::vector<keyed_block> keyed_elsewhere;

  /// Positions [from, to) had their KV computed: counts those below lost_below in recomputed; returns how many.
  int note_computed(int from, int to);
  /// Marks every position that has KV now (or had it before) as lost: all of them will be computed again.
  void mark_all_lost() { lost_below = std::max(lost_below, kv_positions()); }

  bool foreign() const { return foreign_request != 0; }
  int n_generated() const { return int(tokens.size()) - n_prompt; }
  /// True while a step of it computes prompt log probabilities (batch_entry::every_token).
  bool scores_prompt() const { return prompt_logprobs >= 0 && !foreign() && n_cached < n_prompt; }
  /// Sets sampling.constraint's start state and reads the output so far (the tokens after the prompt it was given,
  /// and those an earlier owner generated at the prompt's end); false when the grammar refuses them.
  bool start_constraint();
  /// What its next choice reads: its tokens, where its output starts, its stop ids.
  sampling_history history() const {
    return {tokens, size_t(std::max(n_prompt - output_before, 0)), stop_ids,
            sampling.constraint ? &constraint_state : nullptr,
            max_new_tokens > 0 ? std::max(max_new_tokens - n_generated(), 1) : 0};
  }
  bool finished() const { return finish != finish_reason::none; }
  /// Logical blocks whose 16 tokens all have KV (only those may move).
  uint32_t full_blocks() const { return uint32_t(n_cached / kv_block_tokens); }
  /// Positions whose KV the table holds: those before n_cached and those of the kept blocks.
  int kv_positions() const { return n_cached + int(kept_ahead.size()) * int(kv_block_tokens); }
  /// Tokens a prefill chunk may take from n_cached on before it reaches a kept block.
  int tokens_before_kept() const;
  /// Advances n_cached over the kept blocks it reached.
  void step_over_kept();
  /// Logical blocks `lost` (ascending) lost their KV: their entries become absent (the batcher allocates them
  /// again and prefill computes them), while the blocks after the first of them that have KV stay as they are
  /// (kept_ahead) and n_cached goes back to the first. Returns how many positions are to be computed again
  /// (those blocks' and the partial last block's).
  int forget_lost_blocks(std::span<const uint32_t> lost);
  /// Table entries that hold a block (all but the absent ones).
  uint32_t blocks_held() const;
};

/// Hands out blocks for sequences' new tokens and takes them back.
class block_source {
 public:
  virtual ~block_source() = default;
  /// A block for logical block `index` of `seq`; out_of_blocks when none is free.
  virtual result<block_ref> allocate(const sequence& seq, uint32_t index) = 0;
  virtual status release(const block_ref& ref) = 0;
  /// Gives a sequence that holds no KV the longest prefix of its tokens that a prefix cache holds (its table and
  /// n_cached), leaving one token at least to compute; returns the tokens given. Default: no cache.
  virtual int attach_prefix(sequence& seq) { return 0; }
  /// The sequence's full blocks past keyed_blocks have KV now: a source with a prefix cache offers them to it.
  virtual void blocks_computed(sequence& seq) {}
  /// `seq` finished and is about to release its blocks (its table still whole).
  virtual void finishing(sequence& seq) {}
};

/// What a batcher does when a sequence needs blocks that its source cannot give.
enum class shortage_action {
  preempt,  ///< free the newest other sequence's blocks (it is recomputed later)
  wait,     ///< leave the sequence out of this step; blocks are being found elsewhere
};

/// Limits and policies of a batcher.
struct batcher_options {
  int max_batch_tokens = 512;  ///< token budget per step
  int max_batch_seqs = 256;    ///< sequences per step
  /// Asked when `seq` is `blocks_short` blocks short; default: preempt.
  std::function<shortage_action(const sequence& seq, uint32_t blocks_short)> on_shortage = nullptr;
  /// A step that carries decode tokens takes prefill chunks only up to this many tokens in all (0: up to
  /// max_batch_tokens), so that a prompt's prefill spreads over the decode steps rather than stalling them.
  int mixed_step_tokens = 0;
  /// A step that carries decode tokens takes prefill chunks only when this many steps have passed since the last
  /// one that did (1: every step): prompts come in fewer, larger chunks (max_batch_tokens raised to match), and
  /// most steps of the running sequences carry none, so that their inter-token time is a decode step's.
  int prefill_every_steps = 1;
  /// Prompt tokens whose log probabilities one step may compute (sequence::prompt_logprobs): the engine's
  /// engine_options::max_scored_tokens.
  int max_scored_tokens = 128;
};

/// One planned step: engine entries and, parallel to them, the sequences and their sampling state.
struct step_plan {
  std::vector<batch_entry> entries;
  std::vector<sequence*> sequences;
  /// The sequences of the step, kept alive while whoever runs it holds the plan (its entries point into them):
  /// an instance that dies mid-step frees its batcher, not a step its worker is running.
  std::vector<std::shared_ptr<sequence>> held;
  std::vector<sampling_params> params;  ///< one per sampled entry, in entry order
  std::vector<sampling_history> history;  ///< one per sampled entry: its tokens so far
  std::vector<uint64_t> rng;            ///< one per sampled entry; advanced by sampling
  std::vector<int32_t> sampled;         ///< filled by whoever runs the step
  std::vector<token_logprobs> logprobs;  ///< one per sampled entry; filled where its params ask
  /// Prompt log probabilities the step computed: (entry, position, its token's log probabilities).
  std::vector<std::tuple<size_t, int, token_logprobs>> prompt_scores;
  std::vector<int> partials;            ///< per entry: partials merged per layer (engine stats)
  int decode_tokens = 0;
  bool empty() const { return entries.empty(); }
};

/// Runs sequences to completion on an engine, one step at a time.
class batcher {
 public:
  /// A batcher whose steps run on `e` (its limits cap the options'); step() runs them there.
  batcher(engine& e, block_source& blocks, batcher_options options);
  /// A batcher that only plans and completes: whoever owns the plans runs them (an instance's worker,
  /// or the simulator's model of one); step() is an error.
  batcher(block_source& blocks, batcher_options options);

  /// Queues a sequence; it runs from the next step on.
  void add(std::shared_ptr<sequence> seq);
  /// Marks a sequence cancelled; it is retired (its blocks released) at the next plan or complete.
  bool cancel(uint64_t id);

  /// Plans the next step: picks the tokens, gives them blocks (preempting or waiting when short) and
  /// retires finished sequences. An empty plan means nothing can run now.
  status plan(step_plan& out);
  /// Runs a plan on the engine and samples its tokens (what a worker does).
  static status execute(engine& e, step_plan& plan, const kv_pools& pools, attention_router* router);
  /// After a plan's step: the prompt log probabilities of its every_token entries into plan.prompt_scores.
  static status score_prompts(engine& e, step_plan& plan);
  /// Applies a run plan: appends the sampled tokens, finishes and retires sequences.
  void complete(step_plan& plan);
  /// Reads a sampled token into `s`'s constraint state: a whole output ends it (stop), a refused token is an error.
  static void read_constrained(sequence& s, int32_t token);
  /// Drops a plan whose step failed: its sequences keep nothing of it and run it again in the next plan
  /// (the KV it wrote is written again).
  void discard(step_plan& plan);
  /// Takes running sequence `id` out to start it over later (KV of it was lost): releases its blocks and
  /// returns it with nothing cached, its tokens (prompt and answer so far) and sampling state kept. Null
  /// when no unfinished sequence has that id.
  std::shared_ptr<sequence> take_back(uint64_t id);
  /// plan + execute + complete on this batcher's engine.
  status step(const kv_pools& pools, attention_router* router);

  /// True when no sequence is waiting or running.
  bool idle() const { return active_.empty(); }
  /// Sequences not yet finished, oldest first.
  const std::deque<std::shared_ptr<sequence>>& active() const { return active_; }
  /// Sequences that finished since the last call.
  std::vector<std::shared_ptr<sequence>> take_finished();

  /// Tokens processed by the last completed step, and how many were decode tokens.
  int last_step_tokens() const { return last_tokens_; }
  int last_step_decodes() const { return last_decodes_; }
  /// Positions the last completed step computed again after their KV was lost (sequence::lost_below).
  int last_step_recomputed() const { return last_recomputed_; }

 private:
  struct planned {
    sequence* seq;
    int n_tokens;
    std::shared_ptr<sequence> owner;  ///< seq, as the batcher holds it
  };
  /// The tokens of the next step, leaving out the sequences in `waiting`.
  std::vector<planned> pick(const std::vector<const sequence*>& waiting) const;
  /// Gives every planned sequence the blocks its tokens need, per the shortage policy; those that wait
  /// for blocks leave the batch and are added to `sitting_out`.
  status reserve_blocks(std::vector<planned>& batch, std::vector<const sequence*>& sitting_out);
  /// The logical blocks below `needed` that `seq` has no block for, ascending: absent entries, then those past
  /// its table.
  static std::vector<uint32_t> missing_blocks(const sequence& seq, uint32_t needed);
  status release_all(sequence& seq);
  void preempt(sequence& seq);
  /// Gives a sequence that starts (or starts over) what the prefix cache holds of its tokens.
  void attach_prefix(sequence& seq);
  void retire();

  engine* engine_ = nullptr;  // where step() runs plans; none for plan-only batchers
  block_source& blocks_;
  batcher_options options_;
  std::deque<std::shared_ptr<sequence>> active_;  // admission order: oldest first
  std::vector<std::shared_ptr<sequence>> finished_;
  int last_tokens_ = 0, last_decodes_ = 0, last_recomputed_ = 0;
  int steps_since_prefill_ = 1 << 20;  ///< steps planned since the last that took a prefill chunk
};

}  // namespace illm::gpu
