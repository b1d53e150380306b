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
  routing router = routing::least_requests;
  int max_unstarted = 0;
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
                     std::vector<instance_actor> instances, routing router, int max_unstarted);

}  // namespace illm::actors::sim
