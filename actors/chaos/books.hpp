#pragma once
// The books of a chaos run, kept below every de-duplication: each request is judged from what the instances sent
// it (the tap of actors/checker_hooks.hpp: every token and end, in the order they were sent, and where the request
// was served from which token on) and from what its client saw, against its fault-free answer.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "actors/checker_hooks.hpp"

namespace illm::actors::chaos {

/// The books of one run, or of many added up.
struct books {
  uint64_t runs = 0;
  uint64_t accepted = 0;            ///< requests submitted and taken
  uint64_t completed = 0;           ///< answered with their tokens (length)
  uint64_t failed = 0;              ///< answered with a clear error
  uint64_t unjustified_failed = 0;  ///< failed though the surviving pools could have held them
  uint64_t lost = 0;                ///< never answered
  uint64_t duplicated = 0;          ///< answered more than once (or ended twice by one instance)
  uint64_t mismatched = 0;          ///< a token sent other than the fault-free one at its place, or an answer short
  uint64_t extra_tokens = 0;        ///< tokens sent past max_tokens, after their sender's end, or by a non-server
  uint64_t leaked_blocks = 0;       ///< blocks still taken in surviving pools at the end, or a pool's check failed
  uint64_t missed = 0;              ///< runs whose fault missed its moment or found no target of its kind
  uint64_t faults_injected = 0;     ///< faults of the spec, kills and restarts
  uint64_t recovered_by_replica = 0;    ///< recoveries in which copies of lost blocks were promoted
  uint64_t recovered_by_takeover = 0;   ///< ... in which a new owner adopted the surviving primaries (no copy)
  uint64_t recovered_by_recompute = 0;  ///< ... in which nothing survived: the lost KV was computed again
  uint64_t positions_recomputed = 0;    ///< KV positions the engines prefilled again after losing them
  std::map<std::string, uint64_t> faults;  ///< faults_injected by kind
  /// Every count above with its name (in --json): what adding up books and printing them go through.
  static const std::vector<std::pair<const char*, uint64_t books::*>>& counts();
  books& operator+=(const books& o);
  /// Whether the run kept every promise (nothing lost, twice, wrong, extra, leaked or failed without cause).
  bool clean() const {
    return !lost && !duplicated && !mismatched && !extra_tokens && !leaked_blocks && !unjustified_failed;
  }
};

/// What a client saw of one request (its callbacks).
struct client_view {
  std::vector<int32_t> tokens;
  int ends = 0;
  std::string reason;  ///< of its (first) end
  std::string error;   ///< ... and why, when it failed
};

/// The verdict on one request.
struct verdict {
  bool lost = false;
  bool duplicated = false;
  bool mismatched = false;
  uint64_t extra_tokens = 0;
  bool completed = false;  ///< answered with length (or stop)
  bool failed = false;     ///< answered with another reason
  std::vector<std::string> problems;
};

/// Judges one request from its deliveries (in the order the tap heard them), what its client saw, the tokens it
/// asked for and its fault-free answer (at least max_tokens ids). An end that only acknowledges the cancel a
/// request sends an instance it left is no answer; tokens that such an instance sent after the request left it
/// are checked against the fault-free answer but form no part of it. Deliveries from `shutdown_from` on were
/// made while the harness stopped the cluster: they count (a late second end, a late token), but for the
/// cancellations the stop itself causes.
verdict judge(const std::vector<delivery>& deliveries, const client_view& client, int32_t max_tokens,
              const std::vector<int32_t>& reference, size_t shutdown_from = SIZE_MAX);

}  // namespace illm::actors::chaos
