#pragma once
// Instance failures in the simulator: at the given simulated times, and at random (Poisson) times at a rate per
// instance and hour, an instance chosen by a seeded stream dies as a killed process would (its instance,
// rManager and worker actors), the simulated workers learn that blocks there are gone, and the driver hands its
// requests on. One instance always survives.
#include <caf/all.hpp>
#include <functional>
#include <memory>
#include <set>
#include <vector>

namespace illm::actors::sim {

/// What the failure injector needs.
struct failure_plan {
  std::vector<double> at_s;     ///< simulated seconds from the start
  double rate_per_hour = 0;     ///< per live instance (0: none at random)
  uint64_t seed = 1;
  std::vector<std::function<void()>> kill;  ///< per instance: kills its actors
  std::shared_ptr<std::set<uint32_t>> dead;  ///< the instances that died, read by the simulated workers
  caf::actor driver;                         ///< told (instance_lost_atom, index)
};

/// Spawns the failure injector; it stops with the run.
caf::actor spawn_failures(caf::actor_system& sys, failure_plan plan);

}  // namespace illm::actors::sim
