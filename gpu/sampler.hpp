#pragma once
// Token selection from logits on the host: greedy, or temperature with top-p, from a seeded stream
// that each request carries, so a seed reproduces a run.

#include <cstdint>
#include <vector>

#include "gpu/backend.hpp"

namespace illm::gpu {

/// Advances `state` and returns a uniform float in [0, 1).
float next_uniform(uint64_t& state);

/// The sampling stream's state after `samples` tokens were sampled from a stream seeded with `seed` (each
/// sample advances it once): a request that goes on elsewhere samples on as it would have.
uint64_t sampling_state_after(uint64_t seed, uint64_t samples);

/// Index of the largest logit (the lowest index among equals).
int32_t argmax(const float* logits, int vocab);

/// Picks a token from logits [vocab] per `params`; `rng` is advanced only when sampling.
int32_t sample_token(const float* logits, int vocab, const sampling_params& params, uint64_t& rng);

/// log-softmax of logits [vocab] into out [vocab], in double precision.
void log_softmax(const float* logits, int vocab, std::vector<double>& out);

}  // namespace illm::gpu
