#pragma once
// The chaos suite (`illm chaos`): seeded scenarios of faults on an embedded cluster under a mixed load, each
// run checked against the fault-free answers: every accepted request answered exactly once, with the greedy
// tokens it would have had, failed only when the surviving pools could not hold it, and every surviving pool
// whole at the end. A run is replayed by its scenario and seed.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gpu/model_files.hpp"

namespace illm::actors::chaos {

/// What a scenario does to the cluster while its load runs.
enum class action {
  none,            ///< only the faults of its spec
  kill_holder,     ///< kill an instance holding blocks of the long request (not its owner) while it decodes
  kill_owner,      ///< kill the long request's owner while it decodes
  kill_gmanager,   ///< crash the gManager while the long request decodes, and start another
  kill_mid_room,   ///< kill a holder of the long request's room while its prompt is still being computed
  drain,           ///< drain an instance that does not own the long request while it decodes
  partition,       ///< cut a holder of the long request off the data plane for a while, as it decodes
  join,            ///< start another instance while the long request decodes, and send it more requests
};

/// One scenario: its name, what it does, and the faults it injects (a fault spec without its seed).
struct scenario {
  std::string name;
  std::string description;
  action what = action::none;
  std::string faults;
  /// The long request's owner computes its prompt alone and moves blocks out as it fills (moves that copy
  /// KV), rather than its room's holders computing chunks of it where they will live.
  bool owner_prefills = false;
  /// Nonzero: replicas on for requests of this many tokens (the long request's blocks get copies, in a
  /// cluster of one more instance, so that there is memory for them), and the action waits for the copies.
  uint32_t replica_min_tokens = 0;
};

/// Every scenario, in the order `--seeds N` goes round them.
const std::vector<scenario>& scenarios();
/// The scenario named `name`; null when there is none.
const scenario* find_scenario(const std::string& name);

/// The books of one run, or of many added up.
struct books {
  uint64_t runs = 0;
  uint64_t accepted = 0;            ///< requests submitted and taken
  uint64_t completed = 0;           ///< ended with their tokens (length)
  uint64_t failed = 0;              ///< ended with a clear error
  uint64_t unjustified_failed = 0;  ///< failed though the surviving pools could have held them
  uint64_t lost = 0;                ///< never ended
  uint64_t duplicated = 0;          ///< ended more than once
  uint64_t mismatched = 0;          ///< completed with tokens other than the fault-free ones
  uint64_t leaked_blocks = 0;       ///< blocks still taken in surviving pools at the end, or a pool's check failed
  uint64_t faults_injected = 0;     ///< faults of the spec, kills and restarts
  uint64_t recovered_by_replica = 0;  ///< requests that lost KV and went on from promoted replicas
  uint64_t positions_recomputed = 0;  ///< KV positions computed again because their blocks were lost
  std::map<std::string, uint64_t> faults;  ///< faults_injected by kind
  books& operator+=(const books& o);
  /// Whether the run kept every promise (nothing lost, twice, wrong, leaked or failed without cause).
  bool clean() const { return !lost && !duplicated && !mismatched && !leaked_blocks && !unjustified_failed; }
};

/// One run: a scenario at a seed, its books and what went wrong (empty when clean).
struct run_result {
  std::string scenario;
  uint64_t seed = 0;
  books tally;
  std::vector<std::string> problems;
  double seconds = 0;
};

/// The cluster a run uses.
struct chaos_options {
  /// What the instances run on (instance_settings::backend); the fault-free answers come from the cpu backend.
  std::string backend = "cpu";
  int instances = 3;
  int kv_blocks_per_instance = 64;
  int short_requests = 4;  ///< besides one long request (more than one pool)
  /// Nonzero: replicas on in every scenario for requests of this many tokens (with one more instance).
  int replica_min_tokens = 0;
  /// Told the cluster's log lines (an instance killed, blocks released; empty: dropped).
  std::function<void(const std::string&)> log;
};

/// Runs `s` at `seed` on `model` and checks its books.
run_result run(const gpu::loaded_model& model, const scenario& s, uint64_t seed, const chaos_options& options);

}  // namespace illm::actors::chaos
