#include "actors/sim/failures.hpp"

#include <chrono>
#include <random>

#include "actors/sim/driver.hpp"

namespace illm::actors::sim {

namespace {

using fail_atom = caf::atom_constant<caf::atom("fail")>;

struct failures_state {
  failure_plan plan;
  std::mt19937_64 random;
  static inline const char* name = "sim_failures";
};
using self_ptr = caf::stateful_actor<failures_state>*;

caf::timespan span_of(double seconds) {
  return std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(seconds));
}

size_t live(const failures_state& st) { return st.plan.kill.size() - st.plan.dead->size(); }

/// Schedules the next failure at random, if failures come at a rate.
void schedule_random(self_ptr self) {
  auto& st = self->state;
  if (st.plan.rate_per_hour <= 0 || live(st) < 2) return;
  std::exponential_distribution<double> gap(st.plan.rate_per_hour * double(live(st)) / 3600.0);
  self->delayed_send(self, span_of(gap(st.random)), fail_atom::value, true);
}

/// Kills a live instance chosen at random (none when only one lives).
void fail_one(self_ptr self) {
  auto& st = self->state;
  if (live(st) < 2) return;
  std::vector<uint32_t> alive;
  for (uint32_t i = 0; i < st.plan.kill.size(); ++i)
    if (!st.plan.dead->count(i)) alive.push_back(i);
  const uint32_t victim = alive[std::uniform_int_distribution<size_t>(0, alive.size() - 1)(st.random)];
  st.plan.dead->insert(victim);
  st.plan.kill[victim]();
  self->send(st.plan.driver, instance_lost_atom::value, uint64_t(victim));
}

caf::behavior failures(self_ptr self, failure_plan plan) {
  auto& st = self->state;
  st.plan = std::move(plan);
  st.random.seed(st.plan.seed);
  for (double t : st.plan.at_s) self->delayed_send(self, span_of(t), fail_atom::value, false);
  schedule_random(self);
  return {
      [=](fail_atom, bool at_random) {
        fail_one(self);
        if (at_random) schedule_random(self);
      },
  };
}

}  // namespace

caf::actor spawn_failures(caf::actor_system& sys, failure_plan plan) { return sys.spawn(failures, std::move(plan)); }

}  // namespace illm::actors::sim
