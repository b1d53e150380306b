#include "actors/sim/sim_worker.hpp"

#include <algorithm>
#include <optional>

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

/// Attention work per pool: decode KV tokens and prefill pairs, and the query rows it takes.
struct pool_work {
  double decode_kv = 0, prefill_pairs = 0, rows = 0;
  const gpu::batch_entry* rows_of = nullptr;  // the last entry whose rows are counted
};

/// A lane's share of a step: its tokens, sampled rows and attention work per pool.
struct lane_work {
  double tokens = 0, sampled = 0;
  std::map<instance_id, pool_work> pools;
};

/// The rows [row0, row1) of `plan`, as the engine runs them in one lane (an entry across a bound is cut
/// there; its first part samples nothing).
lane_work work_of_rows(const gpu::step_plan& plan, int64_t row0, int64_t row1) {
  lane_work out;
  int64_t row = 0;
  for (const gpu::batch_entry& e : plan.entries) {
    const int64_t first = std::max(row, row0), last = std::min(row + e.n_tokens, row1);
    if (first < last) {
      const int64_t pos0 = e.pos0 + (first - row), end = e.pos0 + (last - row);
      out.tokens += double(last - first);
      out.sampled += e.sample && last == row + e.n_tokens ? 1 : 0;
      const size_t blocks = std::min<size_t>(gpu::blocks_for_tokens(end), e.table->size());
      for (size_t b = 0; b < blocks; ++b) {
        pool_work& w = out.pools[(*e.table)[b].pool];
        (e.n_tokens == 1 ? w.decode_kv : w.prefill_pairs) += block_pairs(pos0, end, int64_t(b) * gpu::kv_block_tokens);
        if (w.rows_of != &e) {  // the entry's queries go to this pool once
          w.rows += double(last - first);
          w.rows_of = &e;
        }
      }
    }
    row += e.n_tokens;
  }
  return out;
}

/// What one holder does in a layer of a lane: its attention, and the queries' and partials' way there and back
/// (from and to the owner, or, for a holder the queries are relayed to, from and to its relay over NVLink).
struct holder_layer {
  double attention = 0, queries = 0, partials = 0;
  double urgent = 0;  ///< the part of `attention` for decode tokens, when they go first (decode_first)
  bool near = false;  ///< over NVLink (else the NIC)
  std::optional<instance_id> relay;  ///< the holder on its node it gets the queries through
};

/// One layer of a lane, in seconds: the owner's dense before and after attention and its local attention,
/// and each holder's share.
struct lane_layer {
  double front = 0, back = 0, local = 0;
  std::map<instance_id, holder_layer> holders;
  std::map<instance_id, std::vector<instance_id>> behind;  ///< per relay: the holders it relays to
};

/// The earliest second a holder's attention of `layer` may begin in lane `lane` (0: at once).
double gate_of(const layer_gates& gates, size_t lane, instance_id holder, int layer) {
  if (lane >= gates.size()) return 0;
  const auto it = gates[lane].find(holder);
  return it == gates[lane].end() || size_t(layer) >= it->second.size() ? 0.0 : it->second[size_t(layer)];
}

/// Times the layers as the engine runs them: each lane's front (dense, then its queries sent and its
/// local attention), then, layer by layer and lane by lane, the wait for its holders and its back.
/// Holders attend each job in the first gap their calendar leaves once its queries are in, beside their
/// queued work as `hosted` has it, and no earlier than the gates let them; the step starts at `start` on
/// the calendar, and ends `after_layers` after its last layer. `stored` gets, per lane and layer, when that
/// layer's KV is stored.
double time_layers(instance_id self, const std::vector<lane_layer>& lanes, int n_layers, double after_layers,
                   hosted_timing hosted, const std::map<instance_id, double>& holders_busy_s,
                   const layer_gates& gates, hosted_calendar& calendar, double start,
                   std::vector<std::vector<double>>& stored) {
  auto busy_for = [&](instance_id holder) {
    const auto it = holders_busy_s.find(holder);
    return it == holders_busy_s.end() ? 0.0 : it->second;
  };
  // The owner's own part of a layer from `ready` on: at once, or in the time its GPU's calendar leaves free.
  auto own = [&](double ready, double seconds) {
    if (hosted != hosted_timing::interleaved) return ready + seconds;
    return calendar.book(self, start + ready, seconds, hosted_calendar::kind::own) - start;
  };
  double owner = 0;
  std::vector<double> ready(lanes.size(), 0);  // when a lane's partials are all in
  stored.assign(lanes.size(), std::vector<double>(size_t(n_layers), 0.0));
  auto front = [&](size_t i, int layer) {
    owner = own(owner, lanes[i].front);
    const double sent = owner;
    stored[i][size_t(layer)] = sent;
    owner = own(owner, lanes[i].local);
    ready[i] = owner;
    // Queries leave one holder after another on each kind of link, and partials come back the same way; a
    // relay passes the queries on to the holders behind it one after another and merges their partials.
    double out_near = sent, out_far = sent, in_near = 0, in_far = 0;
    auto attend = [&](instance_id holder, const holder_layer& h, double arrived) {
      const double busy = busy_for(holder);
      double earliest = std::max(arrived, gate_of(gates, i, holder, layer));
      if (hosted == hosted_timing::queued) earliest = std::max(earliest, busy);
      // Beside the holder's own queued work (shared), a job takes twice as long.
      const double pace = hosted == hosted_timing::shared && earliest < busy ? 2.0 : 1.0;
      using kind = hosted_calendar::kind;
      const double urgent = calendar.book(holder, start + earliest, pace * h.urgent, kind::urgent);
      const double queued = calendar.book(holder, start + earliest, pace * (h.attention - h.urgent), kind::queued);
      return std::max(urgent, queued) - start;
    };
    for (const auto& [holder, h] : lanes[i].holders) {
      if (h.relay && *h.relay != holder) continue;  // relayed: with its relay
      double& out = h.near ? out_near : out_far;
      out += h.queries;
      double done = attend(holder, h, out);
      if (const auto relays = lanes[i].behind.find(holder); relays != lanes[i].behind.end()) {
        double relayed = out;  // this one relays to the others of its node
        for (instance_id behind : relays->second) {
          const holder_layer& b = lanes[i].holders.at(behind);
          relayed += b.queries;
          done = std::max(done, attend(behind, b, relayed)) + b.partials;
        }
      }
      double& in = h.near ? in_near : in_far;
      in = std::max(in, done) + h.partials;
      ready[i] = std::max(ready[i], in);
    }
  };
  for (size_t i = 0; i < lanes.size(); ++i) front(i, 0);
  for (int l = 0; l < n_layers; ++l)
    for (size_t i = 0; i < lanes.size(); ++i) {
      owner = own(std::max(owner, ready[i]), lanes[i].back);
      if (l + 1 < n_layers) front(i, l + 1);
    }
  return own(owner, after_layers);
}

}  // namespace

double dense_front_share(const gpu::model_config& c) {
  const double d = c.dim, qkv = d * (d + 2.0 * c.kv_dim());
  return qkv / (qkv + d * d + 3.0 * d * c.hidden_dim);
}

/// The first row of a step's second lane, as the engine splits it: its middle row when it runs as two lanes,
/// else its row count.
int64_t middle_row(const step_layout& layout, instance_id self, const gpu::step_plan& plan) {
  int64_t rows = 0;
  for (const gpu::batch_entry& e : plan.entries) rows += e.n_tokens;
  const bool two = gpu::engine::long_enough_for_lanes(layout.overlap_min_tokens, rows) &&
                   gpu::engine::attends_elsewhere(plan.entries, self);
  return two ? rows / 2 : rows;
}

step_cost predict_step(const placement::profile& model, instance_id self, const gpu::step_plan& plan,
                       const step_layout& layout, const std::map<instance_id, double>& holders_busy_s,
                       const layer_gates& gates, hosted_calendar* calendar, double start) {
  int64_t rows = 0;
  for (const gpu::batch_entry& e : plan.entries) rows += e.n_tokens;
  const int64_t middle = middle_row(layout, self, plan);
  const bool two_lanes = middle < rows;
  const std::vector<lane_work> work =
      two_lanes ? std::vector{work_of_rows(plan, 0, middle), work_of_rows(plan, middle, rows)}
                : std::vector{work_of_rows(plan, 0, rows)};
  step_cost cost;
  std::vector<lane_layer> layers;
  double sampled = 0;
  const double n_layers = model.n_layers;
  for (const lane_work& w : work) {
    lane_layer layer;
    const double dense = placement::dense_time(model, w.tokens);
    layer.front = dense * layout.front_share;
    layer.back = dense - layer.front;
    const link_model& links = layout.links;
    std::map<int64_t, instance_id> relays;  // per other node: its first holder this lane relays through
    for (const auto& [pool, p] : w.pools) {
      const double seconds = placement::attention_time(model, p.decode_kv, p.prefill_pairs);
      if (pool == self) {
        layer.local = seconds / n_layers;
        continue;
      }
      holder_layer h{seconds / n_layers, links.seconds(self, pool, p.rows * layout.row_bytes.query),
                     links.seconds(pool, self, p.rows * layout.row_bytes.partial),
                     layout.decode_first ? placement::attention_time(model, p.decode_kv, 0) / n_layers : 0.0,
                     links.same_node(self, pool), {}};
      if (!h.near && layout.relay_min_rows > 0 && p.rows >= layout.relay_min_rows) {
        const auto [relay, first] = relays.try_emplace(links.node_of(pool), pool);
        h.relay = relay->second;
        if (!first) {  // from its relay over the node's NVLink
          h.queries = links.seconds(relay->second, pool, p.rows * layout.row_bytes.query);
          h.partials = links.seconds(pool, relay->second, p.rows * layout.row_bytes.partial);
        }
      }
      if (h.relay && *h.relay != pool) layer.behind[*h.relay].push_back(pool);
      layer.holders[pool] = h;
      cost.hosted_s[pool] += seconds;
    }
    // A relay with nobody behind it is an ordinary holder.
    for (auto& [pool, h] : layer.holders)
      if (h.relay && *h.relay == pool && !layer.behind.count(pool)) h.relay.reset();
    sampled += w.sampled;
    layers.push_back(std::move(layer));
  }
  cost.middle_row = middle;
  const double outside_layers = model.step_overhead_s + placement::sampled_time(model, sampled);
  cost.computing_s = outside_layers;
  for (const lane_layer& l : layers) cost.computing_s += n_layers * (l.front + l.back + l.local);
  hosted_calendar this_step_only;
  cost.seconds = time_layers(self, layers, model.n_layers, outside_layers, layout.hosted, holders_busy_s, gates,
                             calendar ? *calendar : this_step_only, calendar ? start : 0.0, cost.stored_s);
  return cost;
}

void chunk_layers::add(uint32_t owner, uint64_t request, uint64_t id, uint32_t pool, int64_t pos0,
                       std::vector<double> written_s) {
  chunks_[id] = {owner, request, pool, pos0, std::move(written_s)};
}

void chunk_layers::remove(uint64_t id) { chunks_.erase(id); }

std::map<instance_id, std::vector<double>> chunk_layers::before(uint32_t owner, uint64_t request, int64_t pos,
                                                                uint32_t pool) const {
  std::map<instance_id, std::vector<double>> out;
  for (const auto& [id, c] : chunks_) {
    if (c.owner != owner || c.request != request || c.pool == pool || c.pos0 >= pos) continue;
    std::vector<double>& latest = out[c.pool];
    latest.resize(std::max(latest.size(), c.written_s.size()), 0.0);
    for (size_t l = 0; l < c.written_s.size(); ++l) latest[l] = std::max(latest[l], c.written_s[l]);
  }
  return out;
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

/// `seconds` on the actor clock, rounded up: a step never ends before its time has passed.
caf::timespan at_least(double seconds) {
  return std::chrono::ceil<caf::timespan>(std::chrono::duration<double>(seconds));
}

double now_s(caf::local_actor* self) {
  return std::chrono::duration<double>(self->clock().now().time_since_epoch()).count();
}

/// Queues `seconds` of work on the GPU and tells the other workers when it is done; returns when it ends.
/// Attention hosted for others runs while the GPU would otherwise idle, or delays its next step.
double occupy(self_ptr self, const sim_worker_config& cfg, double seconds) {
  auto& st = self->state;
  st.busy_until_s = std::max(st.busy_until_s, now_s(self)) + seconds;
  if (cfg.busy_until && cfg.id < cfg.busy_until->size()) (*cfg.busy_until)[cfg.id] = st.busy_until_s;
  return st.busy_until_s;
}

/// Seconds from now until each other worker's GPU is done with its queued work, when the timing asks.
std::map<instance_id, double> holders_busy(self_ptr self, const sim_worker_config& cfg) {
  std::map<instance_id, double> out;
  const hosted_timing t = cfg.layout.hosted;
  if (t == hosted_timing::priority || t == hosted_timing::interleaved || !cfg.busy_until) return out;
  for (size_t i = 0; i < cfg.busy_until->size(); ++i)
    if (instance_id(i) != cfg.id) out[instance_id(i)] = std::max(0.0, (*cfg.busy_until)[i] - now_s(self));
  return out;
}

void count_step(sim_worker_stats& s, const gpu::step_plan& plan, double seconds, double computing) {
  ++s.steps;
  s.computing_s += computing;
  for (const gpu::batch_entry& e : plan.entries) s.tokens += uint64_t(e.n_tokens);
  s.sampled += plan.params.size();
  s.busy_s += seconds;
}

/// The lanes of a step whose rows end at `middle` (the first lane) and after: the lane of row `row`.
size_t lane_of(int64_t row, int64_t middle) { return row < middle ? 0 : 1; }

/// Per lane, when the holders of chunks before this step's chunks write each layer (seconds from `start`,
/// when the step starts).
layer_gates gates_for(const sim_worker_config& cfg, const gpu::step_plan& plan, double start) {
  layer_gates gates(2);
  if (!cfg.chunks) return gates;
  const int64_t middle = middle_row(cfg.layout, cfg.id, plan);
  int64_t row = 0;
  for (const gpu::batch_entry& e : plan.entries) {
    if (e.foreign_request)
      for (const auto& [pool, written] : cfg.chunks->before(e.foreign_owner, e.foreign_request, e.pos0, cfg.id))
        for (size_t lane = lane_of(row, middle); lane <= lane_of(row + e.n_tokens - 1, middle); ++lane) {
          std::vector<double>& gate = gates[lane][pool];
          gate.resize(std::max(gate.size(), written.size()), 0.0);
          for (size_t l = 0; l < written.size(); ++l) gate[l] = std::max(gate[l], written[l] - start);
        }
    row += e.n_tokens;
  }
  return gates;
}

/// Keeps when each layer of this step's chunks is written (the stored time of the lane of their last row).
void note_chunks(const sim_worker_config& cfg, const gpu::step_plan& plan, const step_cost& cost, double start) {
  if (!cfg.chunks) return;
  int64_t row = 0;
  for (const gpu::batch_entry& e : plan.entries) {
    if (e.foreign_request) {
      const size_t lane = std::min(lane_of(row + e.n_tokens - 1, cost.middle_row), cost.stored_s.size() - 1);
      std::vector<double> written = cost.stored_s[lane];
      for (double& t : written) t += start;
      cfg.chunks->add(e.foreign_owner, e.foreign_request, e.seq_id, cfg.id, e.pos0, std::move(written));
    }
    row += e.n_tokens;
  }
}

/// Starts a step: its time, the holders' share of it, and the answer when the time has passed.
caf::response_promise start_step(self_ptr self, const sim_worker_config& cfg, run_step& job) {
  // After the attention queued on this GPU for others, unless the calendar fits the step's layers among it.
  const bool interleaved = cfg.layout.hosted == hosted_timing::interleaved && cfg.calendar;
  const double waited = interleaved ? 0.0 : std::max(0.0, self->state.busy_until_s - now_s(self));
  const double start = now_s(self) + waited;
  if (cfg.calendar) cfg.calendar->forget_before(now_s(self));
  step_cost cost = predict_step(cfg.model, cfg.id, *job.plan, cfg.layout, holders_busy(self, cfg),
                                gates_for(cfg, *job.plan, start), cfg.calendar.get(), start);
  // Interleaved, the calendar holds the GPU's queue; else the step ends once all queued before it is done.
  const double seconds = interleaved ? cost.seconds : occupy(self, cfg, cost.seconds) - now_s(self);
  note_chunks(cfg, *job.plan, cost, start);
  for (const auto& [holder, s] : cost.hosted_s)
    if (cfg.workers && holder < cfg.workers->size() && (*cfg.workers)[holder])
      self->send((*cfg.workers)[holder], hosted_atom::value, s);
  if (cfg.stats) count_step(*cfg.stats, *job.plan, seconds - waited, cost.computing_s);
  job.plan->partials.assign(job.plan->entries.size(), int(cost.hosted_s.size()) + 1);
  job.plan->sampled.assign(job.plan->params.size(), simulated_token);
  const uint64_t id = self->state.next++;
  auto promise = self->make_response_promise();
  self->state.pending[id] = promise;
  self->state.plans[id] = std::move(job.plan);
  self->delayed_send(self, at_least(seconds), deliver_atom::value, id);
  return promise;
}

/// How much later than booked the step under way ends, as attention hosted since went before its layers
/// (interleaved timing; 0 for the others, whose steps wait for the hosted work before they start).
double pushed_by_hosted(const sim_worker_config& cfg) {
  if (cfg.layout.hosted != hosted_timing::interleaved || !cfg.calendar) return 0;
  const double pushed = cfg.calendar->take_pushed(cfg.id);
  return pushed > 1e-9 ? pushed : 0.0;
}

/// The sequences of `plan` that read blocks at an instance that died, with those instances.
std::vector<gpu::failed_attention> failed_at_dead(const sim_worker_config& cfg, const gpu::step_plan& plan) {
  std::set<gpu::failed_attention> failed;
  if (!cfg.dead || cfg.dead->empty()) return {};
  for (const gpu::batch_entry& e : plan.entries) {
    if (e.foreign_request || !e.table) continue;
    for (const gpu::block_ref& ref : *e.table)
      if (ref.pool != cfg.id && cfg.dead->count(ref.pool)) failed.insert({e.seq_id, ref.pool});
  }
  return {failed.begin(), failed.end()};
}

caf::behavior sim_worker_behavior(self_ptr self, sim_worker_config config) {
  auto cfg = std::make_shared<sim_worker_config>(std::move(config));
  return {
      [=](run_step& job) -> caf::response_promise { return start_step(self, *cfg, job); },
      [=](hosted_atom, double seconds) {
        occupy(self, *cfg, seconds);
        if (cfg->stats) cfg->stats->hosted_s += seconds;
      },
      [=](deliver_atom, uint64_t id) {
        auto& st = self->state;
        auto promise = st.pending.find(id);
        auto plan = st.plans.find(id);
        if (promise == st.pending.end() || plan == st.plans.end()) return;
        if (const double pushed = pushed_by_hosted(*cfg); pushed > 0) {  // hosted jobs went first: later
          if (cfg->stats) cfg->stats->busy_s += pushed;
          self->delayed_send(self, at_least(pushed), deliver_atom::value, id);
          return;
        }
        if (cfg->chunks)
          for (const gpu::batch_entry& e : plan->second->entries)
            if (e.foreign_request) cfg->chunks->remove(e.seq_id);
        std::vector<gpu::failed_attention> failed = failed_at_dead(*cfg, *plan->second);
        std::string error = failed.empty() ? std::string() : "remote attention failed: a holder is gone";
        promise->second.deliver(step_done{std::move(plan->second), std::move(error), std::move(failed)});
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
