#pragma once
// Requests: a request actor hands its request to an instance, which streams its tokens back and says how it
// ended; either side may cancel it.

#include <caf/all.hpp>
#include <cstdint>
#include <string>
#include <vector>
#include "actors/messages/declarations.hpp"
#include "actors/messages/prefix_cache.hpp"
#include "actors/placement/types.hpp"
#include "gpu/backend.hpp"
#include "gpu/tokenizer.hpp"

namespace illm::actors {

/// A number added to a token's logit before sampling.
struct token_bias {
  int32_t token = 0;
  float bias = 0.0f;
};
ILLM_INSPECT(token_bias, x.token, x.bias)

/// A request as a client gives it. The sampling fields are gpu::sampling_params' (see there).
struct generate_params {
  std::vector<int32_t> prompt;  ///< BOS first
  int32_t max_tokens = 64;
  float temperature = 0.0f;
  float top_p = 1.0f;
  uint64_t seed = 0;
  bool ignore_eos = false;
  /// Ids that end it when sampled: the model's end ids (llama2.c's BOS and EOS unless told).
  std::vector<int32_t> stop_ids{gpu::token_bos, gpu::token_eos};
  int32_t top_k = 0;
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::vector<token_bias> logit_bias{};
  int32_t min_tokens = 0;
  int32_t logprobs = -1;
  /// Tokens at the end of the prompt that it generated on an earlier instance (it went on from there).
  int32_t output_before = 0;
  /// The prompt's log probabilities with this many alternatives come with the first token (-1: none).
  int32_t prompt_logprobs = -1;
  /// The grammar its output keeps to (structured outputs): a spec of gpu/grammar/constraint_cache.hpp (empty: none).
  std::string constraint{};
  /// The prefix cache's namespace it reads and fills (a digest of its API key where the operator keeps tenants
  /// apart; empty: the shared one).
  std::string cache_scope{};
};
ILLM_INSPECT(generate_params, x.prompt, x.max_tokens, x.temperature, x.top_p, x.seed, x.ignore_eos, x.stop_ids,
             x.top_k, x.min_p, x.presence_penalty, x.frequency_penalty, x.repetition_penalty, x.logit_bias,
             x.min_tokens, x.logprobs, x.output_before, x.prompt_logprobs, x.constraint, x.cache_scope)

/// The sampler's parameters of a request.
gpu::sampling_params sampling_of(const generate_params& p);
/// A request's sampling fields set from the sampler's parameters (the others left as they are).
void set_sampling(generate_params& p, const gpu::sampling_params& s);

/// A generation request, as a request actor hands it to an instance.
struct generate_request {
  request_id id = 0;
  generate_params params;
  caf::actor client;  ///< the request actor that receives the tokens
  /// Nonzero: the request went on from `takeover_owner`, which died, for the takeover_generation-th time; its new
  /// owner takes over the blocks that survived elsewhere (actors/messages/takeover.hpp).
  uint32_t takeover_generation = 0;
  instance_id takeover_owner = 0;
  /// Positions of its prompt whose KV the instance it went on from had computed, as far as its request actor
  /// knows (all but the last token once it had a token; none before): computing them again counts as recomputed.
  uint32_t lost_positions = 0;
  /// The gManager's index as the front end found it when it routed the request (prefix_found): who holds its
  /// prompt's blocks, which the instance's rManager reads without asking the index again.
  bool prefix_found = false;
  prefix_holders prefix;
};
ILLM_INSPECT(generate_request, x.id, x.params, x.client, x.takeover_generation, x.takeover_owner, x.lost_positions,
             x.prefix_found, x.prefix)

/// A token's log probability.
struct token_logprob {
  int32_t token = 0;
  float logprob = 0.0f;
};
ILLM_INSPECT(token_logprob, x.token, x.logprob)

/// instance -> request actor: the next generated token.
struct token_event {
  request_id req_id = 0;
  int32_t token = 0;
  instance_id from = 0;  ///< the instance that sent it (a request that went on elsewhere ignores its old one)
  /// When the request asks for log probabilities: the token's own, then the most likely tokens' (gpu::token_logprobs).
  std::vector<token_logprob> logprobs{};
  /// The first token of a request that asks for its prompt's log probabilities (prompt_logprobs N): per prompt
  /// position from the second on, its token's own and then N alternatives (N + 1 each).
  std::vector<token_logprob> prompt_logprobs{};
};
ILLM_INSPECT(token_event, x.req_id, x.token, x.from, x.logprobs, x.prompt_logprobs)

/// instance -> request actor: the request ended.
struct request_finished {
  request_id req_id = 0;
  std::string reason;  ///< length, stop, cancelled, error
  std::string error;
  int32_t preemptions = 0;
  std::vector<request_placement_entry> placement;  ///< where its blocks were at its last step
  int32_t generated = 0;                           ///< tokens generated
  int64_t first_token_ns = 0;  ///< the instance's clock (virtual in the simulator) at the first token; 0: none
  int64_t finished_ns = 0;     ///< ... and at the end
  instance_id from = 0;        ///< the instance that sent it
  std::vector<request_placement_entry> replicas{};  ///< where second copies of its blocks were at the end
  int32_t cached_tokens = 0;  ///< prompt tokens whose KV its start found in the prefix cache
};
ILLM_INSPECT(request_finished, x.req_id, x.reason, x.error, x.preemptions, x.placement, x.generated, x.first_token_ns,
             x.finished_ns, x.from, x.replicas, x.cached_tokens)

/// -> request actor or instance: stop generating req_id.
struct cancel_request {
  request_id req_id = 0;
};
ILLM_INSPECT(cancel_request, x.req_id)

}  // namespace illm::actors
