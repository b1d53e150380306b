#pragma once
// The simulator's worker: it runs no model. A step takes the time the performance model predicts for
// its batch, on the actor clock: the non-attention part for its tokens, and attention DistAttention-style
// (the owner attends its local blocks while each holder of its remote blocks attends those; the step
// ends when the slowest has). A holder spends that time too: it is added to the holder's next step.
// Every sampled token is an ordinary token (not an end of text), so requests run to their max tokens.

#include <map>
#include <memory>
#include <vector>

#include "actors/messages.hpp"
#include "actors/placement/perf_model.hpp"

namespace illm::actors::sim {

/// What a simulated worker did (read after the run, on the coordinator's thread).
struct sim_worker_stats {
  uint64_t steps = 0;
  uint64_t tokens = 0;    ///< batch tokens over all steps
  uint64_t sampled = 0;   ///< sampled rows (decode tokens and last prefill chunks)
  double busy_s = 0;      ///< simulated time spent in steps
  double hosted_s = 0;    ///< attention time spent for other instances' requests
};

/// What a simulated worker needs.
struct sim_worker_config {
  instance_id id = 0;
  placement::profile model;
  std::shared_ptr<std::vector<caf::actor>> workers;  ///< every simulated worker, by instance id
  std::shared_ptr<sim_worker_stats> stats;           ///< optional
};

/// The predicted cost of a step.
struct step_cost {
  double seconds = 0;                      ///< until the owner has every partial
  std::map<instance_id, double> hosted_s;  ///< attention each holder of remote blocks does for it
};

/// Predicts a step of `plan` on instance `self` (exposed for tests).
step_cost predict_step(const placement::profile& model, instance_id self, const gpu::step_plan& plan);

/// Spawns a scheduled simulated worker.
caf::actor spawn_sim_worker(caf::actor_system& sys, sim_worker_config config);

}  // namespace illm::actors::sim
