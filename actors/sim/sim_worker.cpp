#include "actors/sim/sim_worker.hpp"

#include <algorithm>

#include "gpu/batcher.hpp"

namespace illm::actors::sim {

namespace {

/// The token every simulated step samples: a plain piece, never BOS or EOS.
constexpr int32_t simulated_token = 3;

using deliver_atom = caf::atom_constant<caf::atom("deliver")>;
using hosted_atom = caf::atom_constant<caf::atom("hosted")>;

/// (query, key) pairs between queries at positions [pos0, end) and the keys of the block starting at
/// `start`, causal: Σ over queries q of min(16, max(0, q + 1 - start)).
double block_pairs(int64_t pos0, int64_t end, int64_t start) {
  const int64_t x0 = std::max(pos0, start) + 1 - start, x1 = end - start;  // q + 1 - start over the queries
  if (x1 < x0) return 0;
  const int64_t b = gpu::kv_block_tokens;
  const int64_t ramp_end = std::min(x1, b);  // x below the block size counts x keys, above it all of them
  const double ramp = ramp_end >= x0 ? double(x0 + ramp_end) * double(ramp_end - x0 + 1) / 2 : 0;
  return ramp + double(b) * double(std::max<int64_t>(0, x1 - std::max(x0 - 1, b)));
}

/// Attention work per pool: decode KV tokens and prefill pairs.
struct pool_work {
  double decode_kv = 0, prefill_pairs = 0;
};

}  // namespace

step_cost predict_step(const placement::profile& model, instance_id self, const gpu::step_plan& plan) {
  double tokens = 0;
  std::map<instance_id, pool_work> work;
  for (const gpu::batch_entry& e : plan.entries) {
    tokens += e.n_tokens;
    const int64_t end = int64_t(e.pos0) + e.n_tokens;
    const size_t blocks = std::min<size_t>(gpu::blocks_for_tokens(end), e.table->size());
    for (size_t b = 0; b < blocks; ++b) {
      const double pairs = block_pairs(e.pos0, end, int64_t(b) * gpu::kv_block_tokens);
      pool_work& w = work[(*e.table)[b].pool];
      (e.n_tokens == 1 ? w.decode_kv : w.prefill_pairs) += pairs;
    }
  }
  step_cost cost;
  double local = 0, slowest_holder = 0;
  for (const auto& [pool, w] : work) {
    const double t = placement::attention_time(model, w.decode_kv, w.prefill_pairs);
    if (pool == self) {
      local = t;
    } else {
      cost.hosted_s[pool] = t;
      slowest_holder = std::max(slowest_holder, t);
    }
  }
  cost.seconds = placement::step_time(model, tokens, 0, double(plan.params.size())) + std::max(local, slowest_holder);
  return cost;
}

struct sim_worker_state {
  std::map<uint64_t, caf::response_promise> pending;
  std::map<uint64_t, std::shared_ptr<gpu::step_plan>> plans;
  double busy_until_s = 0;  // simulated time when the GPU has done its steps and the attention it hosts
  uint64_t next = 1;
  static inline const char* name = "sim_worker";
};

namespace {

using self_ptr = caf::stateful_actor<sim_worker_state>*;

double now_s(caf::local_actor* self) {
  return std::chrono::duration<double>(self->clock().now().time_since_epoch()).count();
}

/// Queues `seconds` of work on the GPU; returns when it ends. Attention hosted for others runs while the
/// GPU would otherwise idle, or delays its next step.
double occupy(self_ptr self, double seconds) {
  auto& st = self->state;
  st.busy_until_s = std::max(st.busy_until_s, now_s(self)) + seconds;
  return st.busy_until_s;
}

void count_step(sim_worker_stats& s, const gpu::step_plan& plan, double seconds) {
  ++s.steps;
  for (const gpu::batch_entry& e : plan.entries) s.tokens += uint64_t(e.n_tokens);
  s.sampled += plan.params.size();
  s.busy_s += seconds;
}

/// Starts a step: its time, the holders' share of it, and the answer when the time has passed.
caf::response_promise start_step(self_ptr self, const sim_worker_config& cfg, run_step& job) {
  step_cost cost = predict_step(cfg.model, cfg.id, *job.plan);
  const double waited = std::max(0.0, self->state.busy_until_s - now_s(self));
  const double seconds = occupy(self, cost.seconds) - now_s(self);
  for (const auto& [holder, s] : cost.hosted_s)
    if (cfg.workers && holder < cfg.workers->size() && (*cfg.workers)[holder])
      self->send((*cfg.workers)[holder], hosted_atom::value, s);
  if (cfg.stats) count_step(*cfg.stats, *job.plan, seconds - waited);
  job.plan->partials.assign(job.plan->entries.size(), int(cost.hosted_s.size()) + 1);
  job.plan->sampled.assign(job.plan->params.size(), simulated_token);
  const uint64_t id = self->state.next++;
  auto promise = self->make_response_promise();
  self->state.pending[id] = promise;
  self->state.plans[id] = std::move(job.plan);
  self->delayed_send(self, std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(seconds)),
                     deliver_atom::value, id);
  return promise;
}

caf::behavior sim_worker_behavior(self_ptr self, sim_worker_config config) {
  auto cfg = std::make_shared<sim_worker_config>(std::move(config));
  return {
      [=](run_step& job) -> caf::response_promise { return start_step(self, *cfg, job); },
      [=](hosted_atom, double seconds) {
        occupy(self, seconds);
        if (cfg->stats) cfg->stats->hosted_s += seconds;
      },
      [=](deliver_atom, uint64_t id) {
        auto& st = self->state;
        auto promise = st.pending.find(id);
        auto plan = st.plans.find(id);
        if (promise == st.pending.end() || plan == st.plans.end()) return;
        promise->second.deliver(step_done{std::move(plan->second), {}});
        st.pending.erase(promise);
        st.plans.erase(plan);
      },
  };
}

}  // namespace

caf::actor spawn_sim_worker(caf::actor_system& sys, sim_worker_config config) {
  return sys.spawn(sim_worker_behavior, std::move(config));
}

}  // namespace illm::actors::sim
