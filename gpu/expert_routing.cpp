#include "gpu/expert_routing.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace illm::gpu {

namespace {

/// The k experts of one row of logits, largest first (of equal logits the lower expert), with their weights.
void top_experts(const float* logits, int n_experts, int k, bool norm_topk, int32_t* chosen, float* weight,
                 std::vector<int32_t>& order) {
  order.resize(size_t(n_experts));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  const float top = logits[order[0]];
  double all = 0, kept = 0;
  for (int e = 0; e < n_experts; ++e) all += std::exp(double(logits[e]) - top);
  for (int j = 0; j < k; ++j) {
    chosen[j] = order[size_t(j)];
    weight[j] = float(std::exp(double(logits[chosen[j]]) - top) / all);
    kept += weight[j];
  }
  if (norm_topk)
    for (int j = 0; j < k; ++j) weight[j] = float(weight[j] / kept);
}

}  // namespace

void route_tokens(const float* logits, int m, int n_experts, int k, bool norm_topk, expert_routing& out) {
  const size_t slots = size_t(m) * size_t(k);
  std::vector<int32_t> expert(slots), order;
  out.weight.resize(slots);
  for (int i = 0; i < m; ++i)
    top_experts(logits + size_t(i) * size_t(n_experts), n_experts, k, norm_topk, expert.data() + size_t(i) * k,
                out.weight.data() + size_t(i) * k, order);
  // Counting sort of the slots by expert, tokens in order within an expert.
  out.first.assign(size_t(n_experts) + 1, 0);
  for (int32_t e : expert) ++out.first[size_t(e) + 1];
  std::partial_sum(out.first.begin(), out.first.end(), out.first.begin());
  std::vector<int32_t> next(out.first.begin(), out.first.end() - 1);
  out.source_row.resize(slots);
  out.slot.resize(slots);
  for (size_t s = 0; s < slots; ++s) {
    const int32_t at = next[size_t(expert[s])]++;
    out.source_row[size_t(at)] = int32_t(s / size_t(k));
    out.slot[s] = at;
  }
}

}  // namespace illm::gpu
