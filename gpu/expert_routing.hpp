#pragma once
// The routing of a mixture-of-experts layer on the host: each token's k experts picked from its router logits, and
// the token rows grouped by expert so that each expert's rows are multiplied as one product.

#include <cstdint>
#include <vector>

namespace illm::gpu {

/// Where m tokens' k experts run: their slots (rows of the experts' buffers) grouped by expert.
struct expert_routing {
  std::vector<int32_t> source_row;  ///< [m * k] in expert order: the token row whose input each slot takes
  std::vector<int32_t> slot;        ///< [m][k]: the slot of token i's j-th expert
  std::vector<float> weight;        ///< [m][k]: the weight of token i's j-th expert in its output
  std::vector<int32_t> first;       ///< [n_experts + 1]: expert e's slots are [first[e], first[e + 1])
};

/// Routes m tokens by their router logits [m][n_experts]: the k largest of each row (of equal logits the lower
/// expert), weighed by their softmax probabilities over all the experts, divided by the k's sum when norm_topk (which
/// is the softmax over the k alone, as Mixtral computes it).
void route_tokens(const float* logits, int m, int n_experts, int k, bool norm_topk, expert_routing& out);

}  // namespace illm::gpu
