#include "actors/placement/simple_policy.hpp"

#include <algorithm>
#include <map>

namespace illm::actors::placement {

namespace {

/// Blocks per request of an instance: (total, local).
std::map<request_id, std::pair<uint32_t, uint32_t>> request_blocks(const instance_snapshot& s) {
  std::map<request_id, std::pair<uint32_t, uint32_t>> out;
  for (const auto& e : s.placement) {
    out[e.req_id].first += e.num_blocks;
    if (e.local) out[e.req_id].second += e.num_blocks;
  }
  return out;
}

}  // namespace

std::vector<move_order> simple_policy(const std::vector<instance_snapshot>& cluster) {
  std::vector<move_order> orders;
  std::vector<uint32_t> free(cluster.size());
  for (size_t i = 0; i < cluster.size(); ++i) free[i] = cluster[i].stats.free_blocks;
  for (size_t src = 0; src < cluster.size(); ++src) {
    const instance_snapshot& s = cluster[src];
    if (s.stats.draining || free[src] > 0) continue;
    // The emptiest other instance that takes loans.
    size_t dst = cluster.size();
    for (size_t j = 0; j < cluster.size(); ++j)
      if (j != src && !cluster[j].stats.draining && free[j] > 0 && (dst == cluster.size() || free[j] > free[dst]))
        dst = j;
    if (dst == cluster.size()) break;  // nowhere to lend from
    const auto blocks = request_blocks(s);
    auto longest = std::max_element(blocks.begin(), blocks.end(), [](const auto& a, const auto& b) {
      return a.second.first < b.second.first;
    });
    if (longest == blocks.end() || longest->second.second < 2) continue;
    const uint32_t n = std::min(longest->second.second - 1, std::max(1u, free[dst] / 2));
    orders.push_back({longest->first, s.id, cluster[dst].id, n});
    free[dst] -= n;
  }
  return orders;
}

}  // namespace illm::actors::placement
