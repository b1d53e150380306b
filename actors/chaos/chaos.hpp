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

#include "actors/chaos/books.hpp"
#include "actors/checker_hooks.hpp"
#include "actors/settings/settings.hpp"
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
  hang_holder,     ///< an instance holding blocks of the long request hangs while it decodes: nobody is told
  hang_owner,      ///< the long request's owner hangs while it decodes: nobody is told
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
  /// cluster of two more instances, so that there is memory for them), and the action waits for the copies.
  uint32_t replica_min_tokens = 0;
};

/// Every scenario, in the order `--seeds N` goes round them.
const std::vector<scenario>& scenarios();
/// The scenario named `name`; null when there is none.
const scenario* find_scenario(const std::string& name);

/// One run: a scenario at a seed, its books and what went wrong (empty when clean).
struct run_result {
  std::string scenario;
  uint64_t seed = 0;
  books tally;
  std::vector<std::string> problems;
  std::string missed;  ///< why its fault missed its moment or found no target of its kind (empty: it did not)
  double seconds = 0;
};

/// The cluster a run uses.
struct chaos_options {
  /// What the instances run on (instance_settings::backend); the fault-free answers come from the cpu backend.
  std::string backend = "cpu";
  /// The element type of the instances' KV pools (instance_settings::kv_type).
  std::string kv_type = "f32";
  /// The instances' prefix caches (instance_settings::prefix_cache); with one, the short requests' prompts start
  /// with a part of the long request's, so that they share cached blocks with it and with each other.
  std::string prefix_cache = "off";
  int prefix_copy = instance_settings{}.prefix_copy;  ///< instance_settings::prefix_copy
  int instances = 3;
  int kv_blocks_per_instance = 64;
  int short_requests = 4;  ///< besides one long request (more than one pool)
  /// Nonzero: replicas on in every scenario for requests of this many tokens (with two more instances).
  int replica_min_tokens = 0;
  /// A defect the instances plant on purpose (what the tests of the books use to show they catch it).
  planted_defect plant = planted_defect::none;
  /// Told the cluster's log lines (an instance killed, blocks released; empty: dropped).
  std::function<void(const std::string&)> log;
};

/// Runs `s` at `seed` on `model` and checks its books.
run_result run(const gpu::loaded_model& model, const scenario& s, uint64_t seed, const chaos_options& options);

}  // namespace illm::actors::chaos
