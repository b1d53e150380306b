#pragma once
// Token selection from logits on the host: greedy, or temperature with top-p, from a seeded stream
// that each request carries, so a seed reproduces a run.

#include <cstdint>
#include <vector>

#include "gpu/backend.hpp"

namespace illm::gpu {

/// Advances `state` and returns a uniform float in [0, 1).
float next_uniform(uint64_t& state);

/// Index of the largest logit (the lowest index among equals).
int32_t argmax(const float* logits, int vocab);

/// Picks a token from logits [vocab] per `params`; `rng` is advanced only when sampling.
int32_t sample_token(const float* logits, int vocab, const sampling_params& params, uint64_t& rng);

/// log-softmax of logits [vocab] into out [vocab], in double precision.
void log_softmax(const float* logits, int vocab, std::vector<double>& out);

}  // namespace illm::gpu
