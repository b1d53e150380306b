#pragma once
// The paper's greedy placement (plain C++, no CAF), run by the gManager every period:
//   debtors   = instances with batch size <= beta_threshold, by batch size ascending;
//   creditors = instances with memory use <= memory_threshold, by memory use ascending;
//   for each debtor: r = its longest request, block_max = r's blocks that can move;
//     for each creditor: block_best = the block count the performance model says gains the most
//       cluster throughput; stop this debtor when it gains nothing; else move block_best of r there,
//       re-sort the creditors, block_max -= block_best.
// Freeing a debtor's blocks lets it admit queued requests (a larger batch); hosting them costs the
// creditor attention time (T + K/g), while the debtor no longer attends them (T - K/g).

#include "actors/placement/perf_model.hpp"
#include "actors/placement/types.hpp"

namespace illm::actors::placement {

/// The knobs of the greedy policy.
struct greedy_options {
  double beta_threshold = 32;     ///< instances with at most this many running requests may be debtors
  double memory_threshold = 0.9;  ///< instances using at most this share of their pool may be creditors
  uint32_t max_blocks_per_move = 1u << 16;
};

/// One decision of the greedy pass, with the throughput gain the model expects.
struct scored_order {
  move_order order;
  double gain_tps = 0;
};

/// The greedy pass over a cluster snapshot.
std::vector<scored_order> greedy_pass(const std::vector<instance_snapshot>& cluster, const profile& model,
                                      const greedy_options& options);

/// The greedy pass as a gManager policy.
policy greedy_policy(profile model, greedy_options options = {});

}  // namespace illm::actors::placement
