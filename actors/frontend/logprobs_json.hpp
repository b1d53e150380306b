#pragma once
// Log probabilities as OpenAI's APIs show them: the legacy completions' {tokens, token_logprobs, top_logprobs,
// text_offset} and chat's {content: [{token, logprob, bytes, top_logprobs}]}, for a whole response or the tokens
// of one streamed chunk.

#include <cstddef>
#include <cstdint>
#include <span>

#include <nlohmann/json.hpp>

#include "actors/frontend/openai_api.hpp"
#include "gpu/sampler.hpp"
#include "gpu/tokenizer.hpp"

namespace illm::actors::frontend {

/// The choice's "logprobs" object for `kind`.
nlohmann::json logprobs_json(endpoint kind, const logprobs_part& part);

/// vLLM's prompt_logprobs: per prompt position null (the first) or {token id: {logprob, rank, decoded_token}} for
/// the prompt's token and the likeliest alternatives (rank 1 for the likeliest; null for a prompt token outside
/// them, whose rank is not computed).
nlohmann::json vllm_prompt_logprobs(const gpu::tokenizer& vocab, std::span<const int32_t> prompt,
                                    std::span<const gpu::token_logprobs> values);

/// The bytes of the texts of `ids` decoded one after another from `before` (the text_offset of the token after).
size_t text_bytes(const gpu::tokenizer& vocab, std::span<const int32_t> ids, int32_t before);

}  // namespace illm::actors::frontend
