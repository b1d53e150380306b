// The host sampler beyond temperature and top-p: top-k, min-p, the penalties over a sequence's tokens, logit
// bias, min_tokens' bar on the stop ids, and the log probabilities it reports (from the logits as the model gave
// them).
#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <vector>

#include "gpu/sampler.hpp"

namespace gpu = illm::gpu;

namespace {

/// Tokens drawn `draws` times from `logits` with `p` (history empty), as a set.
std::set<int32_t> drawn(const std::vector<float>& logits, const gpu::sampling_params& p, int draws = 400) {
  std::set<int32_t> out;
  uint64_t rng = 11;
  for (int i = 0; i < draws; ++i) out.insert(gpu::sample_token(logits.data(), int(logits.size()), p, rng));
  return out;
}

}  // namespace

TEST_SUITE("gpu") {
  TEST_CASE("top_k and min_p keep only the likely tokens") {
    const std::vector<float> logits = {2.0f, 1.9f, 1.0f, 0.0f, -3.0f};
    gpu::sampling_params p{1.0f, 1.0f};
    CHECK(drawn(logits, p).size() == 5);
    p.top_k = 2;
    CHECK(drawn(logits, p) == std::set<int32_t>{0, 1});
    p.top_k = 0;
    p.min_p = 0.3f;  // e^-1 = 0.37 of the top survives; e^-2 = 0.14 does not
    CHECK(drawn(logits, p) == std::set<int32_t>{0, 1, 2});
  }

  TEST_CASE("penalties, bias and min_tokens change the logits as OpenAI and vLLM define them") {
    std::vector<float> logits = {1.0f, 2.0f, -1.0f, 0.5f, 3.0f};
    const std::vector<int32_t> tokens = {2, 3, 1, 1, 3, 1};  // prompt {2, 3}, output {1, 1, 3, 1}
    const std::vector<int32_t> stops = {4};
    const gpu::sampling_history history{tokens, 2, stops};
    gpu::sampling_params p;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.repetition_penalty = 2.0f;
    p.logit_bias = {{0, 1.5f}, {2, -4.0f}};
    p.min_tokens = 5;  // 4 out: the stop id is barred
    gpu::apply_penalties(logits.data(), 5, p, history);
    CHECK(logits[0] == doctest::Approx(2.5f));                           // biased only
    CHECK(logits[1] == doctest::Approx(2.0f / 2 - 0.5f - 0.25f * 3));     // repeated, 3 times in the output
    CHECK(logits[2] == doctest::Approx((-1.0f - 4.0f) * 2));              // in the prompt only: no presence penalty
    CHECK(logits[3] == doctest::Approx(0.5f / 2 - 0.5f - 0.25f));         // prompt and once in the output
    CHECK(std::isinf(logits[4]));
    CHECK(logits[4] < 0);
    std::vector<float> again = {1.0f, 2.0f, -1.0f, 0.5f, 3.0f};
    p.min_tokens = 4;  // reached: the stop id may be sampled
    gpu::apply_penalties(again.data(), 5, p, history);
    CHECK(again[4] == doctest::Approx(3.0f));
  }

  TEST_CASE("choose_token reports the log-softmax of the logits before penalties, and samples after them") {
    const std::vector<float> row = {0.0f, 3.0f, 1.0f, 2.0f};
    std::vector<float> logits = row;
    const std::vector<int32_t> tokens = {1};
    gpu::sampling_params p;
    p.logit_bias = {{1, -100.0f}};
    p.logprobs = 2;
    gpu::token_logprobs lp;
    uint64_t rng = 5;
    const int32_t chosen = gpu::choose_token(logits.data(), 4, p, {tokens, 1, {}}, rng, &lp);
    CHECK(chosen == 3);  // greedy after the bias pushed 1 down
    // log-softmax by hand: logit - log(sum of e^logit) over {0, 3, 1, 2}.
    const double log_total = std::log(1.0 + std::exp(3.0) + std::exp(1.0) + std::exp(2.0));
    const std::vector<double> reference = {0.0 - log_total, 3.0 - log_total, 1.0 - log_total, 2.0 - log_total};
    CHECK(reference[1] == doctest::Approx(-0.4401896985));  // the number itself, worked out apart
    CHECK(lp.logprob == doctest::Approx(reference[3]));
    REQUIRE(lp.top_ids == std::vector<int32_t>{1, 3});
    CHECK(lp.top_logprobs[0] == doctest::Approx(reference[1]));
    CHECK(lp.top_logprobs[1] == doctest::Approx(reference[3]));
    CHECK(rng == 5);  // greedy draws nothing
    CHECK_FALSE(p.plain());
    CHECK(gpu::sampling_params{0.7f, 0.9f, 40, 0.05f}.plain());
  }
}
