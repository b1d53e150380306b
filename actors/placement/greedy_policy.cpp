#include "actors/placement/greedy_policy.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace illm::actors::placement {

namespace {

constexpr double tokens_per_block = 16;

/// An instance as the pass sees and updates it.
struct working {
  instance_id id = 0;
  double beta = 0;        ///< running requests
  double kv_tokens = 0;   ///< KV tokens its steps attend (its own local blocks and hosted ones)
  double total = 0, used = 0;  ///< blocks
  double waiting = 0, waiting_blocks = 0;
  std::map<request_id, std::pair<uint32_t, uint32_t>> requests;  // owned: (total blocks, local blocks)

  double memory_use() const { return total > 0 ? used / total : 1.0; }
  double free() const { return total - used; }
};

working from_snapshot(const instance_snapshot& s) {
  working w;
  w.id = s.id;
  w.beta = s.stats.batch_size;
  w.total = s.stats.total_blocks;
  w.used = s.stats.total_blocks - s.stats.free_blocks;
  w.waiting = s.stats.waiting;
  w.waiting_blocks = s.stats.waiting_blocks;
  double local_blocks = 0;
  for (const auto& e : s.placement) {
    auto& r = w.requests[e.req_id];
    r.first += e.num_blocks;
    if (e.local) {
      r.second += e.num_blocks;
      local_blocks += e.num_blocks;
    }
  }
  w.kv_tokens = (local_blocks + s.stats.hosted_blocks) * tokens_per_block;
  return w;
}

/// Requests a debtor admits once k more of its blocks are free.
double admitted(const working& d, double k) {
  if (d.waiting <= 0 || d.waiting_blocks <= 0) return 0;
  const double each = d.waiting_blocks / d.waiting;
  return std::min(d.waiting, std::floor((d.free() + k) / each) - std::floor(d.free() / each));
}

/// Cluster throughput change when k blocks (k * 16 tokens) of the debtor are kept and attended by c.
double gain(const profile& m, const working& d, const working& c, double k) {
  const double moved = k * tokens_per_block;
  const double n = admitted(d, k);
  const double each_tokens = n > 0 ? d.waiting_blocks / d.waiting * tokens_per_block : 0;
  const double d_after = instance_tps(m, d.beta + n, d.kv_tokens - moved + n * each_tokens);
  const double c_after = instance_tps(m, c.beta, c.kv_tokens + moved);
  return d_after + c_after - instance_tps(m, d.beta, d.kv_tokens) - instance_tps(m, c.beta, c.kv_tokens);
}

/// Block counts worth evaluating up to k_max: where the debtor's batch can grow, powers of two, k_max.
std::vector<double> candidates(const working& d, double k_max) {
  std::set<double> ks = {k_max};
  for (double k = 1; k < k_max; k *= 2) ks.insert(k);
  if (d.waiting > 0 && d.waiting_blocks > 0) {
    const double each = d.waiting_blocks / d.waiting;
    const double step = std::max(1.0, std::ceil(k_max / each / 64)) * each;  // at most ~64 points
    for (double k = std::ceil(each - std::fmod(d.free(), each)); k <= k_max; k += step) ks.insert(k);
  }
  return {ks.begin(), ks.end()};
}

}  // namespace

std::vector<scored_order> greedy_pass(const std::vector<instance_snapshot>& cluster, const profile& model,
                                      const greedy_options& options) {
  std::vector<working> all;
  for (const auto& s : cluster)
    if (!s.stats.draining) all.push_back(from_snapshot(s));
  std::vector<working*> debtors, creditors;
  for (auto& w : all) {
    if (w.beta <= options.beta_threshold) debtors.push_back(&w);
    if (w.memory_use() <= options.memory_threshold) creditors.push_back(&w);
  }
  std::stable_sort(debtors.begin(), debtors.end(), [](auto* a, auto* b) { return a->beta < b->beta; });
  auto by_memory = [](auto* a, auto* b) { return a->memory_use() < b->memory_use(); };
  std::stable_sort(creditors.begin(), creditors.end(), by_memory);

  std::vector<scored_order> orders;
  for (working* d : debtors) {
    // Its longest request, and how many of its blocks can move (full local ones: all but the last).
    auto longest = std::max_element(d->requests.begin(), d->requests.end(), [](const auto& a, const auto& b) {
      return a.second.first < b.second.first;
    });
    if (longest == d->requests.end() || longest->second.second < 2) continue;
    const request_id r = longest->first;
    double block_max = std::min<double>(longest->second.second - 1, options.max_blocks_per_move);
    std::set<instance_id> tried;
    for (size_t i = 0; i < creditors.size() && block_max > 0;) {
      working* c = creditors[i];
      if (c == d || tried.count(c->id)) {
        ++i;
        continue;
      }
      tried.insert(c->id);
      const double room = std::floor(options.memory_threshold * c->total - c->used);
      const double k_max = std::min(block_max, room);
      double best_k = 0, best_gain = 0;
      for (double k : k_max >= 1 ? candidates(*d, k_max) : std::vector<double>{}) {
        const double g = gain(model, *d, *c, k);
        if (g > best_gain) {
          best_gain = g;
          best_k = k;
        }
      }
      if (best_k <= 0) break;  // no gain from this creditor on: the next debtor
      orders.push_back({{r, d->id, c->id, uint32_t(best_k)}, best_gain});
      const double n = admitted(*d, best_k);
      d->kv_tokens += -best_k * tokens_per_block + n * (d->waiting > 0 ? d->waiting_blocks / d->waiting : 0) *
                                                       tokens_per_block;
      d->waiting_blocks -= n > 0 ? n * d->waiting_blocks / d->waiting : 0;
      d->beta += n;
      d->waiting -= n;
      d->used -= best_k;
      c->used += best_k;
      c->kv_tokens += best_k * tokens_per_block;
      block_max -= best_k;
      std::stable_sort(creditors.begin(), creditors.end(), by_memory);
      i = 0;  // the re-sorted list, from its least used creditor not yet tried
    }
  }
  return orders;
}

policy greedy_policy(profile model, greedy_options options) {
  return [model = std::move(model), options](const std::vector<instance_snapshot>& cluster) {
    std::vector<move_order> out;
    for (const auto& o : greedy_pass(cluster, model, options)) out.push_back(o.order);
    return out;
  };
}

}  // namespace illm::actors::placement
