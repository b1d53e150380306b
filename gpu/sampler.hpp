#pragma once
// Token selection from logits on the host: greedy, or temperature with top-k, top-p and min-p, from a seeded
// stream that each request carries, so a seed reproduces a run; and what a request asks beyond that (penalties
// over its tokens so far, logit bias, a minimum output length, log probabilities), applied to a copy of its row.

#include <cstdint>
#include <span>
#include <vector>

#include "gpu/backend.hpp"
#include "gpu/grammar/token_mask.hpp"

namespace illm::gpu {

/// Advances `state` and returns a uniform float in [0, 1).
float next_uniform(uint64_t& state);

/// The sampling stream's state after `samples` tokens were sampled from a stream seeded with `seed` (each
/// sample advances it once): a request that goes on elsewhere samples on as it would have.
uint64_t sampling_state_after(uint64_t seed, uint64_t samples);

/// Index of the largest logit (the lowest index among equals).
int32_t argmax(const float* logits, int vocab);

/// Picks a token from logits [vocab] per `params` (temperature, top_k, top_p, min_p); `rng` is advanced only
/// when sampling.
int32_t sample_token(const float* logits, int vocab, const sampling_params& params, uint64_t& rng);

/// log-softmax of logits [vocab] into out [vocab], in double precision.
void log_softmax(const float* logits, int vocab, std::vector<double>& out);

/// The chosen token's log probability and the most likely tokens' (most likely first, the lowest id first among
/// equals), from the log-softmax of the logits as the model gave them: before penalties, bias, masks and
/// temperature (what vLLM reports by default).
struct token_logprobs {
  float logprob = 0.0f;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
};

/// The `top` most likely tokens of a row's log probabilities into `out` (with `chosen`'s).
void fill_logprobs(const std::vector<double>& logprobs, int32_t chosen, int top, token_logprobs& out);

/// What a row's choice reads beyond its logits.
struct sampling_history {
  std::span<const int32_t> tokens;  ///< the sequence's tokens so far (prompt, then output)
  size_t output_from = 0;           ///< tokens from here on are its output
  std::span<const int32_t> stop_ids;  ///< barred until the output has min_tokens
  /// With a constraint: where the output stands in its grammar (the stop ids are allowed only where it may end).
  const grammar::match_state* constraint_state = nullptr;
  /// Tokens the output may still have, this one included (0: no bound): a constrained output whose budget runs out
  /// takes the shortest way to a whole value.
  int tokens_left = 0;
};

/// Applies `params`' bias, bars, penalties over `history` and constraint to logits [vocab] in place (host memory).
void apply_penalties(float* logits, int vocab, const sampling_params& params, const sampling_history& history);

/// Bars the tokens that would take the output out of `params.constraint`'s grammar (the stop ids stay where the
/// output may end there).
void apply_constraint(float* logits, int vocab, const sampling_params& params, const sampling_history& history);

/// A whole choice on the host: the log probabilities when asked (into `logprobs`), then apply_penalties, then
/// sample_token. `logits` is the row's copy and is changed.
int32_t choose_token(float* logits, int vocab, const sampling_params& params, const sampling_history& history,
                     uint64_t& rng, token_logprobs* logprobs);

}  // namespace illm::gpu
