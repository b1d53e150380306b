#include "gpu/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <unordered_map>
#include <utility>

namespace illm::gpu {

namespace {
constexpr uint64_t golden_gamma = 0x9e3779b97f4a7c15ull;  // splitmix64's increment

/// How many of `probs` (sorted, most likely first; `total` their sum) top_k, top_p and min_p keep, in that order;
/// at least one.
size_t kept_candidates(const std::vector<std::pair<double, int32_t>>& probs, const sampling_params& params,
                       double total) {
  size_t end = probs.size();
  double mass = total;
  if (params.top_k > 0 && size_t(params.top_k) < end) {
    end = size_t(params.top_k);
    mass = 0;
    for (size_t i = 0; i < end; ++i) mass += probs[i].first;
  }
  if (params.top_p < 1.0f) {
    double kept = 0;
    for (size_t i = 0; i < end; ++i) {
      kept += probs[i].first;
      if (kept >= params.top_p * mass) {
        end = i + 1;
        break;
      }
    }
  }
  if (params.min_p > 0.0f) {
    const double floor = double(params.min_p) * probs[0].first;
    size_t i = 1;
    while (i < end && probs[i].first >= floor) ++i;
    end = i;
  }
  return std::max<size_t>(end, 1);
}

}  // namespace

float next_uniform(uint64_t& state) {
  state += golden_gamma;  // splitmix64
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return float(z >> 40) / float(1u << 24);
}

uint64_t sampling_state_after(uint64_t seed, uint64_t samples) { return seed + samples * golden_gamma; }

int32_t argmax(const float* logits, int vocab) {
  int32_t best = 0;
  for (int32_t i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  return best;
}

int32_t sample_token(const float* logits, int vocab, const sampling_params& params, uint64_t& rng) {
  if (params.temperature <= 0.0f) return argmax(logits, vocab);
  // Softmax at the temperature, in double so that tiny probabilities are not lost.
  const float max_logit = logits[argmax(logits, vocab)];
  std::vector<std::pair<double, int32_t>> probs(static_cast<size_t>(vocab));
  double total = 0;
  for (int32_t i = 0; i < vocab; ++i) {
    const double p = std::isinf(logits[i]) ? 0.0 : std::exp(double(logits[i] - max_logit) / params.temperature);
    probs[i] = {p, i};
    total += p;
  }
  double mass = total;
  size_t end = probs.size();
  if ((params.top_k > 0 && params.top_k < vocab) || params.top_p < 1.0f || params.min_p > 0.0f) {
    std::sort(probs.begin(), probs.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    end = kept_candidates(probs, params, total);
    if (end < probs.size()) {
      mass = 0;
      for (size_t i = 0; i < end; ++i) mass += probs[i].first;
    }
  }
  const double target = double(next_uniform(rng)) * mass;
  double cumulative = 0;
  for (size_t i = 0; i < end; ++i) {
    cumulative += probs[i].first;
    if (target < cumulative) return probs[i].second;
  }
  return probs[end - 1].second;  // rounding left the target at the very end
}

void log_softmax(const float* logits, int vocab, std::vector<double>& out) {
  out.resize(size_t(vocab));
  double max_logit = logits[argmax(logits, vocab)];
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - max_logit);
  const double log_sum = std::log(sum) + max_logit;
  for (int i = 0; i < vocab; ++i) out[i] = double(logits[i]) - log_sum;
}

namespace {
/// A log probability as a finite float (one that underflows, or a broken row's NaN, becomes the lowest float):
/// messages carry only finite numbers.
float finite_logprob(double x) {
  return std::isfinite(x) ? float(std::max(x, double(std::numeric_limits<float>::lowest())))
                          : std::numeric_limits<float>::lowest();
}
}  // namespace

void fill_logprobs(const std::vector<double>& logprobs, int32_t chosen, int top, token_logprobs& out) {
  out.logprob = finite_logprob(logprobs[size_t(chosen)]);
  out.top_ids.clear();
  out.top_logprobs.clear();
  top = std::min(top, int(logprobs.size()));
  if (top <= 0) return;
  std::vector<int32_t> ids(logprobs.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(i);
  auto more_likely = [&](int32_t a, int32_t b) { return logprobs[a] != logprobs[b] ? logprobs[a] > logprobs[b] : a < b; };
  std::partial_sort(ids.begin(), ids.begin() + top, ids.end(), more_likely);
  for (int i = 0; i < top; ++i) {
    out.top_ids.push_back(ids[size_t(i)]);
    out.top_logprobs.push_back(finite_logprob(logprobs[size_t(ids[size_t(i)])]));
  }
}

void apply_penalties(float* logits, int vocab, const sampling_params& params, const sampling_history& history) {
  for (const auto& [id, bias] : params.logit_bias)
    if (id >= 0 && id < vocab) logits[id] += bias;
  const size_t from = std::min(history.output_from, history.tokens.size());
  if (history.tokens.size() - from < size_t(std::max(params.min_tokens, 0)))
    for (int32_t id : history.stop_ids)
      if (id >= 0 && id < vocab) logits[id] = -std::numeric_limits<float>::infinity();
  if (params.repetition_penalty != 1.0f) {
    std::vector<uint8_t> seen(size_t(vocab), 0);
    for (int32_t id : history.tokens)
      if (id >= 0 && id < vocab && !seen[size_t(id)]) {
        seen[size_t(id)] = 1;
        float& l = logits[id];
        l = l > 0 ? l / params.repetition_penalty : l * params.repetition_penalty;
      }
  }
  if (params.presence_penalty != 0.0f || params.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> counts;
    for (size_t i = from; i < history.tokens.size(); ++i) ++counts[history.tokens[i]];
    for (const auto& [id, n] : counts)
      if (id >= 0 && id < vocab) logits[id] -= params.presence_penalty + params.frequency_penalty * float(n);
  }
  if (params.constraint && history.constraint_state) apply_constraint(logits, vocab, params, history);
}

namespace {

/// A constrained output this close to its budget (in bytes to its end, past the shortest way) takes the shortest way.
constexpr int closing_margin = 32;

/// When `history`'s budget runs out: the tokens that bring its output closer to a whole value (and the stop ids
/// where it is whole); nullopt when the budget is far or no such token is found.
std::optional<std::vector<int32_t>> closing_tokens(const sampling_params& params, const sampling_history& history) {
  if (history.tokens_left <= 0) return std::nullopt;
  const grammar::match_state& state = *history.constraint_state;
  const std::optional<int> d = params.constraint->closing_distance(state);
  if (!d || history.tokens_left > *d + closing_margin) return std::nullopt;
  std::vector<int32_t> out = params.constraint->closer_tokens(state);
  if (state.accepts()) out.insert(out.end(), history.stop_ids.begin(), history.stop_ids.end());
  if (out.empty()) return std::nullopt;
  return out;
}

}  // namespace

void apply_constraint(float* logits, int vocab, const sampling_params& params, const sampling_history& history) {
  const grammar::match_state& state = *history.constraint_state;
  if (const auto closing = closing_tokens(params, history)) {
    std::vector<float> kept;
    for (int32_t id : *closing) kept.push_back(id >= 0 && id < vocab ? logits[id] : 0.0f);
    std::fill(logits, logits + vocab, -std::numeric_limits<float>::infinity());
    for (size_t i = 0; i < closing->size(); ++i)
      if ((*closing)[i] >= 0 && (*closing)[i] < vocab) logits[(*closing)[i]] = kept[i];
    return;
  }
  const auto allowed = params.constraint->allowed(state);
  std::vector<std::pair<int32_t, float>> stops;  // a stop id may end an output the grammar has read whole
  if (state.accepts())
    for (int32_t id : history.stop_ids)
      if (id >= 0 && id < vocab) stops.emplace_back(id, logits[id]);
  allowed->for_each_excluded([&](int32_t id) {
    if (id < vocab) logits[id] = -std::numeric_limits<float>::infinity();
  });
  for (int i = allowed->size(); i < vocab; ++i) logits[i] = -std::numeric_limits<float>::infinity();
  for (const auto& [id, logit] : stops) logits[id] = logit;
}

int32_t choose_token(float* logits, int vocab, const sampling_params& params, const sampling_history& history,
                     uint64_t& rng, token_logprobs* logprobs) {
  std::vector<double> raw;
  if (logprobs && params.logprobs >= 0) log_softmax(logits, vocab, raw);
  apply_penalties(logits, vocab, params, history);
  const int32_t token = sample_token(logits, vocab, params, rng);
  if (!raw.empty()) fill_logprobs(raw, token, params.logprobs, *logprobs);
  return token;
}

}  // namespace illm::gpu
