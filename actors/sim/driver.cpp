#include "actors/sim/driver.hpp"

#include <algorithm>

namespace illm::actors::sim {

namespace {

using arrive_atom = caf::atom_constant<caf::atom("arrive")>;

/// What a request adds to its instance's load under a routing.
uint64_t load_of(routing r, const tracked& t) {
  switch (r) {
    case routing::least_prompt_tokens:
    case routing::prefix_aware:
      return uint64_t(t.input);
    case routing::least_tokens:
      return uint64_t(t.input + t.output);
    default:
      return 1;
  }
}

/// Per instance, the tokens of request `index`'s prompt its prefix cache holds now (a router's overlap).
std::vector<uint64_t> cached_tokens(const driver_state& st, size_t index) {
  std::vector<uint64_t> out(st.instances.size(), 0);
  const tracked& t = st.record->requests[index];
  const std::vector<int32_t> tokens = tokens_of(t, index);
  const auto keys = gpu::chain_keys(st.routing.root, tokens, (tokens.size() - 1) / gpu::kv_block_tokens);
  for (size_t i = 0; i < out.size(); ++i)
    if (i < st.routing.caches.size() && st.routing.caches[i])
      out[i] = st.routing.caches[i]->match(st.routing.root, keys, tokens) * gpu::kv_block_tokens;
  return out;
}

/// The instance for request `index`, among those that may take one now; none: instances.size().
size_t route(driver_state& st, size_t index) {
  const size_t n = st.instances.size();
  auto open = [&](size_t i) {
    return st.alive[i] && (st.routing.max_unstarted == 0 || st.unstarted[i] < st.routing.max_unstarted);
  };
  if (st.routing.router == routing::round_robin) {
    for (size_t k = 0; k < n; ++k, ++st.next)
      if (open(st.next % n)) return st.next++ % n;
    return n;
  }
  std::vector<double> cost(st.load.begin(), st.load.end());
  if (st.routing.router == routing::prefix_aware) {
    const std::vector<uint64_t> cached = cached_tokens(st, index);
    const double input = double(st.record->requests[index].input);
    for (size_t i = 0; i < n; ++i) cost[i] += st.routing.prefix_weight * (input - double(cached[i]));
  }
  size_t best = n;
  for (size_t i = 0; i < n; ++i)
    if (open(i) && (best == n || cost[i] < cost[best])) best = i;
  return best;
}

void send_to(caf::stateful_actor<driver_state>* self, size_t target, size_t i);

/// Sends held requests, oldest first, while an instance may take one.
void dispatch(caf::stateful_actor<driver_state>* self) {
  auto& st = self->state;
  while (!st.held.empty()) {
    const size_t i = st.held.front();
    const size_t target = route(st, i);
    if (target == st.instances.size()) return;
    st.held.pop_front();
    tracked& t = st.record->requests[i];
    t.instance = target;
    t.sent = true;
    st.load[target] += load_of(st.routing.router, t);
    if (!t.started) ++st.unstarted[target];
    send_to(self, target, i);
  }
}

/// Sends request `i` to instance `target`: its prompt and the tokens it has, for the tokens still to come; one
/// that went on from a dead instance names it, to have the blocks that survived taken over.
void send_to(caf::stateful_actor<driver_state>* self, size_t target, size_t i) {
  tracked& t = self->state.record->requests[i];
  t.generated_before = t.generated;
  generate_request r{i + 1, {tokens_of(t, i), t.output - t.generated, 0.0f, 1.0f, 0, true},
                     caf::actor_cast<caf::actor>(self)};
  if (t.resumed > 0) {
    r.takeover_generation = t.resumed;
    r.takeover_owner = t.lost_owner;
    if (t.generated > 0) r.lost_positions = uint32_t(t.input + t.generated - 1);
  }
  self->send(self->state.instances[target], std::move(r));
}

/// Instance `lost` died: its unfinished requests go on elsewhere, first among the held ones.
void on_instance_lost(caf::stateful_actor<driver_state>* self, size_t lost) {
  auto& st = self->state;
  if (!st.alive[lost]) return;
  st.alive[lost] = false;
  ++st.record->failures;
  for (size_t i = 0; i < st.record->requests.size(); ++i) {
    tracked& t = st.record->requests[i];
    if (t.done || t.instance != lost || (!t.started && !t.sent)) continue;
    st.load[lost] -= load_of(st.routing.router, t);
    if (!t.started) --st.unstarted[lost];
    ++t.resumed;
    t.lost_owner = uint32_t(lost);
    const size_t target = route(st, i);
    if (target == st.instances.size()) {  // nobody takes it now: it waits with the held ones
      t.sent = false;
      st.held.push_front(i);
      continue;
    }
    t.instance = target;
    st.load[target] += load_of(st.routing.router, t);
    if (!t.started) ++st.unstarted[target];
    send_to(self, target, i);
  }
}

/// The request has started, or ended before it did: its instance may take another.
void mark_started(caf::stateful_actor<driver_state>* self, tracked& t) {
  if (t.started) return;
  t.started = true;
  --self->state.unstarted[t.instance];
  dispatch(self);
}

}  // namespace

std::vector<int32_t> tokens_of(const tracked& t, size_t index) {
  std::vector<int32_t> out(size_t(t.input + t.generated));
  const uint64_t own = (uint64_t(1) << 63) | index;  // no hash id is this large
  for (size_t p = 0; p < out.size(); ++p) {
    const bool hashed = p < size_t(t.input) && !t.hash_ids.empty();
    const uint64_t source = hashed ? t.hash_ids[p / frontend::trace_hash_block_tokens] : own;
    const uint64_t place = hashed ? p % frontend::trace_hash_block_tokens : p;
    out[p] = 3 + int32_t(gpu::mix_bits(gpu::mix_bits(source) + place) % 30000);
  }
  if (!out.empty()) out[0] = 1;  // BOS
  return out;
}

caf::behavior driver(caf::stateful_actor<driver_state>* self, std::shared_ptr<driver_record> record,
                     std::vector<instance_actor> instances, driver_routing routing) {
  auto& st = self->state;
  st.record = std::move(record);
  st.instances = std::move(instances);
  st.routing = std::move(routing);
  st.load.assign(st.instances.size(), 0);
  st.unstarted.assign(st.instances.size(), 0);
  st.alive.assign(st.instances.size(), true);
  st.record->start = self->clock().now();
  for (size_t i = 0; i < st.record->requests.size(); ++i)
    self->delayed_send(
        self,
        std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(st.record->requests[i].arrival_s)),
        arrive_atom::value, uint64_t(i));
  auto find = [=](request_id id) -> tracked* {
    auto& requests = self->state.record->requests;
    return id == 0 || id > requests.size() ? nullptr : &requests[id - 1];
  };
  return {
      [=](arrive_atom, uint64_t i) {
        self->state.held.push_back(size_t(i));
        dispatch(self);
      },
      [=](const request_finished& f) {
        auto& st = self->state;
        tracked* t = find(f.req_id);
        if (!t || t->done || f.from != t->instance) return;
        t->done = true;
        t->end = f;
        if (t->resumed > 0) {  // as one answer: its tokens and preemptions before it went on, its first token's time
          t->end.generated += t->generated_before;
          t->end.preemptions += int32_t(t->resumed);
          if (t->first_token_ns) t->end.first_token_ns = t->first_token_ns;
        }
        st.load[t->instance] -= load_of(st.routing.router, *t);
        ++st.record->finished;
        mark_started(self, *t);
      },
      [=](const token_event& e) {
        tracked* t = find(e.req_id);
        if (!t || t->done || e.from != t->instance) return;  // from an instance it left
        ++t->generated;
        if (!t->first_token_ns)
          t->first_token_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(self->clock().now().time_since_epoch()).count();
        mark_started(self, *t);
      },
      [=](instance_lost_atom, uint64_t lost) { on_instance_lost(self, size_t(lost)); },
  };
}

std::shared_ptr<driver_record> record_of(const std::vector<frontend::trace_row>& trace, const sim_options& o,
                                         size_t n) {
  auto record = std::make_shared<driver_record>();
  record->requests.resize(n);
  const double scale = o.rate_scale > 0 ? o.rate_scale : 1e9;
  for (size_t i = 0; i < n; ++i) {
    record->requests[i] = {(trace[i].arrival_s - trace[0].arrival_s) / scale,
                           std::max(1, trace[i].input_tokens),
                           std::max(1, trace[i].output_tokens),
                           0,
                           false,
                           false,
                           {}};
    record->requests[i].hash_ids = trace[i].hash_ids;
  }
  return record;
}

}  // namespace illm::actors::sim
