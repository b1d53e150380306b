#pragma once
// The simulator's client: it sends a trace's requests to the instances at their arrival times (in simulated
// time), as the routing picks, and records what comes back for the report.

#include <caf/all.hpp>

#include <deque>
#include <memory>
#include <vector>

#include "actors/frontend/trace_replay.hpp"
#include "actors/interfaces.hpp"
#include "actors/messages.hpp"
#include "actors/sim/simulation.hpp"
#include "gpu/prefix_cache.hpp"

namespace illm::actors::sim {

using clock_type = caf::actor_clock;

/// One request as the driver tracks it.
struct tracked {
  double arrival_s = 0;
  int input = 0, output = 0;
  size_t instance = 0;
  bool started = false;  // its first token came
  bool done = false;
  int generated = 0;     // tokens that came (counted when failures are injected: instances stream them)
  uint32_t resumed = 0;  // times it went on elsewhere because its instance died
  bool sent = false;     // sent to an instance (not held)
  uint32_t lost_owner = 0;      // with resumed: the instance it went on from
  int generated_before = 0;     // with resumed: its tokens when it last went on
  int64_t first_token_ns = 0;   // when its first token came (the driver's clock)
  request_finished end;
  std::vector<uint64_t> hash_ids;  // the trace's ids of its prompt's blocks (empty: none)
};

/// Request `index`'s tokens: its prompt, made of its hash ids (two prompts are equal up to the end of a block of
/// trace_hash_block_tokens where their ids are) or of its own when it has none, BOS first; then the tokens it has
/// generated.
std::vector<int32_t> tokens_of(const tracked& t, size_t index);

/// How the driver picks instances.
struct driver_routing {
  routing router = routing::least_requests;
  int max_unstarted = 0;  ///< sim_options::max_unstarted
  double prefix_weight = 1;  ///< routing::prefix_aware's
  std::vector<std::shared_ptr<gpu::prefix_cache>> caches;  ///< per instance (none: no cache)
  gpu::block_key root;  ///< of the caches' keys
};

/// What the driver records; the simulation reads it after the run (one thread: the test coordinator's).
struct driver_record {
  std::vector<tracked> requests;
  clock_type::time_point start;
  size_t finished = 0;
  size_t failures = 0;  ///< instances that died
};

/// The driver's record of the first `n` requests of the trace, arrivals `o.rate_scale` times faster.
std::shared_ptr<driver_record> record_of(const std::vector<frontend::trace_row>& trace, const sim_options& o, size_t n);

/// (instance_lost_atom, index): the driver's instance at `index` died.
using instance_lost_atom = caf::atom_constant<caf::atom("inst_lost")>;

/// What the driver holds while it runs.
struct driver_state {
  std::shared_ptr<driver_record> record;
  std::vector<instance_actor> instances;
  driver_routing routing;
  std::vector<uint64_t> load;  // per instance, unfinished: requests, prompt tokens or all tokens (the routing's)
  std::vector<int> unstarted;  // per instance, requests sent that have not started
  std::deque<size_t> held;     // arrived, not sent yet
  std::vector<bool> alive;     // per instance: not dead (failures injected)
  size_t next = 0;             // round robin
  static inline const char* name = "sim_driver";
};

/// The trace's client: sends each request at its arrival time to the instance the routing picks, and
/// keeps what comes back in `record`. When an instance dies, its unfinished requests go on on the others with
/// their prompts and the tokens so far, taken over (generate_request::takeover_generation), as a front end does.
caf::behavior driver(caf::stateful_actor<driver_state>* self, std::shared_ptr<driver_record> record,
                     std::vector<instance_actor> instances, driver_routing routing);

}  // namespace illm::actors::sim
