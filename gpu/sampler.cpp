#include "gpu/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace illm::gpu {

namespace {
constexpr uint64_t golden_gamma = 0x9e3779b97f4a7c15ull;  // splitmix64's increment
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
    const double p = std::exp(double(logits[i] - max_logit) / params.temperature);
    probs[i] = {p, i};
    total += p;
  }
  double mass = total;
  auto end = probs.end();
  if (params.top_p < 1.0f) {
    // Keep the most likely tokens until their mass reaches top_p.
    std::sort(probs.begin(), probs.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    });
    double kept = 0;
    for (auto it = probs.begin(); it != probs.end(); ++it) {
      kept += it->first;
      if (kept >= params.top_p * total) {
        end = it + 1;
        break;
      }
    }
    mass = kept;
  }
  const double target = double(next_uniform(rng)) * mass;
  double cumulative = 0;
  for (auto it = probs.begin(); it != end; ++it) {
    cumulative += it->first;
    if (target < cumulative) return it->second;
  }
  return (end - 1)->second;  // rounding left the target at the very end
}

void log_softmax(const float* logits, int vocab, std::vector<double>& out) {
  out.resize(size_t(vocab));
  double max_logit = logits[argmax(logits, vocab)];
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(double(logits[i]) - max_logit);
  const double log_sum = std::log(sum) + max_logit;
  for (int i = 0; i < vocab; ++i) out[i] = double(logits[i]) - log_sum;
}

}  // namespace illm::gpu
