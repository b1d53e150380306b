#include "actors/attention_server.hpp"

#include <algorithm>
#include <chrono>
#include <map>

#include <fmt/format.h>

#include "actors/faults/hang.hpp"

namespace illm::actors {

namespace {


/// A chunk's attend whose blocks are not written that far yet.
struct parked_attend {
  instance_id from = 0;
  attend request;
  std::chrono::steady_clock::time_point since;
  uint64_t relay = 0;  // the relay its partial goes into (0: answered to `from`)
};

/// An attend this server relays to holders on its node: its partial and theirs, merged, go back to `from`.
struct relay_state {
  instance_id from = 0;
  uint64_t tag = 0;       // the requester's
  size_t waiting = 0;     // partials still to come, its own included
  partials merged;        // so far
  bool any = false;       // merged holds one yet
  std::string error;      // the first error
  std::chrono::steady_clock::time_point since;
};

struct attention_server_state {
  std::vector<parked_attend> parked;
  std::map<uint64_t, relay_state> relays;       // by relay id
  std::map<uint64_t, uint64_t> relayed;         // a forwarded attend's tag -> its relay id
  uint64_t next_relay = 1;
  bool recheck_due = false;
  static inline const char* name = "attention_server";
};

using self_ptr = attention_server_actor::stateful_pointer<attention_server_state>;

/// MicroAttention of `a`'s queries over `physical` (first tokens at `first_token`) into `p`.
void attend_blocks(const attention_server_config& c, const attend& a, const std::vector<uint32_t>& physical,
                   const std::vector<int32_t>& first_token, partials& p) {
  const size_t row = size_t(c.shape.n_heads) * c.shape.head_dim;
  const size_t rows = size_t(a.n_q) * c.shape.n_heads;
  p.m.resize(rows);
  p.e.resize(rows);
  p.ma.resize(rows * c.shape.head_dim);
  const gpu::status s = c.kernels->run(c.shape.at_layer(a.layer), c.pool->layer_view(a.layer),
                                       {a.q.data(), row, a.q_pos.data(), a.n_q, physical, first_token, p.m.data(),
                                        p.e.data(), p.ma.data()});
  p.ok = s.is_ok();
  if (!p.ok) p.error = s.message();
}

/// Why `a` cannot be answered here (empty: it can): a shape that is not this model's, or (for a chunk's
/// queries) a listed block that this pool does not keep for that request of that owner.
std::string refusal(const attention_server_config& c, const attend& a, instance_id from) {
  const size_t row = size_t(c.shape.n_heads) * c.shape.head_dim;
  if (a.layer >= c.n_layers || a.q.size() != size_t(a.n_q) * row) return "attend does not match this model's shape";
  for (uint32_t b : a.blocks)
    if (!c.pool->is_used(b) || c.pool->owner(b) != gpu::block_owner{a.req_id, a.owner})
      return fmt::format("instance {} keeps no block {} of request {} of instance {} (asked by instance {})",
                         c.plane->self(), b, a.req_id, a.owner, from);
  return {};
}

/// Attends of `from` waiting here for their blocks.
size_t waiting_of(const attention_server_state& st, instance_id from) {
  return size_t(std::count_if(st.parked.begin(), st.parked.end(), [&](const parked_attend& w) { return w.from == from; }));
}

/// Whether every listed block has `a`'s layer written.
bool written(const attention_server_config& c, const attend& a) {
  for (uint32_t b : a.blocks)
    if (c.pool->layers_written(b) <= uint32_t(a.layer)) return false;
  return true;
}

partials answer(const attention_server_config& c, const attend& a, instance_id from) {
  partials p;
  p.tag = a.tag;
  if (std::string why = refusal(c, a, from); !why.empty()) {
    p.error = std::move(why);
    return p;
  }
  if (!a.blocks.empty()) {
    attend_blocks(c, a, a.blocks, a.block_pos, p);
    return p;
  }
  const std::optional<hosted_blocks::blocks> found = a.logical_runs.empty()
                                                         ? c.hosted->find(from, a.req_id, a.num_blocks)
                                                         : c.hosted->find_logical(from, a.req_id, a.logical_runs);
  if (!found) {
    p.error = fmt::format("instance {} keeps no {} blocks of request {} for instance {}", c.plane->self(),
                          a.num_blocks, a.req_id, from);
    return p;
  }
  attend_blocks(c, a, found->physical, found->first_token, p);
  return p;
}

void send_answer(const attention_server_config& c, instance_id to, const partials& p) {
  const std::vector<uint8_t> payload = encode(p);
  c.plane->send(to, transport::channel::partials, payload, [](transport::status) {});
}

/// Answers relay `id` with `p` (its tag set here) and forgets it and its forwarded attends.
void end_relay(self_ptr self, const attention_server_config& c, uint64_t id, partials p) {
  auto& st = self->state;
  auto it = st.relays.find(id);
  if (it == st.relays.end()) return;
  p.tag = it->second.tag;
  send_answer(c, it->second.from, p);
  st.relays.erase(it);
  std::erase_if(st.relayed, [id](const auto& entry) { return entry.second == id; });
}

/// A partial of relay `id` is in (its own, or a forwarded holder's): merged, and once all are, answered.
void contribute(self_ptr self, const attention_server_config& c, uint64_t id, const partials& p) {
  auto& relays = self->state.relays;
  auto it = relays.find(id);
  if (it == relays.end()) return;  // answered already (an error came first, or it expired)
  relay_state& r = it->second;
  if (!p.ok && r.error.empty()) r.error = p.error.empty() ? "a relayed holder could not attend" : p.error;
  if (p.ok && !r.any) {
    r.merged = p;
    r.any = true;
  } else if (p.ok) {
    merge_partials(r.merged, p, c.shape.head_dim);
  }
  if (--r.waiting > 0 && r.error.empty()) return;
  partials out = r.error.empty() ? std::move(r.merged) : partials{};
  out.ok = r.error.empty();
  out.error = r.error;
  end_relay(self, c, id, std::move(out));
}

/// Where attend `a`'s partial goes: to its requester, or into relay `relay`.
void deliver(self_ptr self, const attention_server_config& c, instance_id from, uint64_t relay, partials p) {
  if (relay) return contribute(self, c, relay, p);
  send_answer(c, from, p);
}

/// Relays `a`'s queries to the holders it forwards to (over this node's links), each over its own blocks;
/// returns the relay that merges their partials with this holder's own.
uint64_t start_relay(self_ptr self, const attention_server_config& c, instance_id from, const attend& a) {
  auto& st = self->state;
  const uint64_t id = st.next_relay++;
  st.relays[id] = {from, a.tag, a.forwards.size() + 1, {}, false, {}, std::chrono::steady_clock::now()};
  if (c.metrics) c.metrics->attention_relays.with({std::to_string(c.plane->self())}).add();
  attention_server_actor me{self};
  for (const attend::forward& f : a.forwards) {
    attend sub;
    sub.tag = relay_tag_bit | (uint64_t(c.plane->self()) << 44) | st.next_relay++;
    sub.req_id = a.req_id;
    sub.owner = a.owner;
    sub.layer = a.layer;
    sub.n_q = a.n_q;
    sub.num_blocks = uint32_t(f.blocks.size());
    sub.q = a.q;
    sub.q_pos = a.q_pos;
    sub.blocks = f.blocks;
    sub.block_pos = f.block_pos;
    st.relayed[sub.tag] = id;
    const uint64_t tag = sub.tag;
    const uint32_t peer = f.peer;
    c.plane->send(peer, transport::channel::attend, encode(sub), [me, tag, peer](transport::status s) {
      if (s.is_ok()) return;
      caf::anon_send(me, incoming_partials{peer, encode(partials{tag, false, s.message, {}, {}, {}})});
    });
  }
  return id;
}

/// Answers the parked attends whose blocks are written now, refuses those whose blocks went (their request
/// ended) or that waited past the limit, and keeps the rest.
void retry_parked(self_ptr self, const attention_server_config& c) {
  auto& parked = self->state.parked;
  const auto now = std::chrono::steady_clock::now();
  std::vector<parked_attend> still;
  for (parked_attend& w : parked) {
    if (std::string why = refusal(c, w.request, w.from); !why.empty()) {
      deliver(self, c, w.from, w.relay, partials{w.request.tag, false, std::move(why), {}, {}, {}});
    } else if (written(c, w.request)) {
      deliver(self, c, w.from, w.relay, answer(c, w.request, w.from));
    } else if (now - w.since > c.wait_limit) {
      deliver(self, c, w.from, w.relay,
              partials{w.request.tag, false,
                       fmt::format("the blocks of request {} were not written within {} ms", w.request.req_id,
                                   c.wait_limit.count()),
                       {}, {}, {}});
    } else {
      still.push_back(std::move(w));
    }
  }
  parked = std::move(still);
  // Relays whose forwarded holders never answered.
  std::vector<uint64_t> late;
  for (const auto& [id, r] : self->state.relays)
    if (now - r.since > c.wait_limit) late.push_back(id);
  for (uint64_t id : late) end_relay(self, c, id, partials{0, false, "relayed holders did not answer in time", {}, {}, {}});
}

/// While attends wait, looks at them every so often too: their blocks may be released without a write.
void schedule_recheck(self_ptr self) {
  if ((self->state.parked.empty() && self->state.relays.empty()) || self->state.recheck_due) return;
  self->state.recheck_due = true;
  self->delayed_send(self, std::chrono::milliseconds(200), recheck_atom::value);
}

attention_server_actor::behavior_type attention_server_behavior(self_ptr self, attention_server_config config) {
  faults::silent_when_told(self);
  auto cfg = std::make_shared<attention_server_config>(std::move(config));
  cfg->kernels = std::make_shared<gpu::staged_attention>(*cfg->device);
  // The pool outlives the server: its listener holds the server weakly, and tells it only while it lives.
  caf::weak_actor_ptr me{self->ctrl()};
  if (cfg->watches_writes)
    cfg->pool->set_written_listener([me] {
      if (caf::strong_actor_ptr server = me.lock())
        server->enqueue(nullptr, caf::make_message_id(), caf::make_message(written_atom::value), nullptr);
    });
  return {
      [=](const incoming_attend& in) {
        auto request = decode_attend(in.payload);
        if (!request.is_ok()) {  // the tag is unknown: the owner times out on it
          send_answer(*cfg, in.from, partials{0, false, request.error().message(), {}, {}, {}});
          return;
        }
        attend& a = request.value();
        const uint64_t relay = a.forwards.empty() ? 0 : start_relay(self, *cfg, in.from, a);
        if (relay) schedule_recheck(self);
        if (!a.blocks.empty() && refusal(*cfg, a, in.from).empty() && !written(*cfg, a)) {
          if (waiting_of(self->state, in.from) >= cfg->max_waiting_per_peer) {
            if (cfg->metrics) cfg->metrics->peer_limit_violations.with({std::to_string(cfg->plane->self())}).add();
            partials refused{a.tag, false, fmt::format("instance {} has {} attends waiting here already (at most {})",
                                                       in.from, cfg->max_waiting_per_peer, cfg->max_waiting_per_peer),
                             {}, {}, {}};
            return deliver(self, *cfg, in.from, relay, std::move(refused));
          }
          self->state.parked.push_back({in.from, std::move(a), std::chrono::steady_clock::now(), relay});
          schedule_recheck(self);
          return;
        }
        deliver(self, *cfg, in.from, relay, answer(*cfg, a, in.from));
      },
      [=](const incoming_partials& in) {
        auto p = decode_partials(in.payload);
        if (!p.is_ok()) return;
        auto& relayed = self->state.relayed;
        const auto it = relayed.find(p->tag);
        if (it == relayed.end()) return;  // late: its relay has ended
        const uint64_t relay = it->second;
        relayed.erase(it);
        contribute(self, *cfg, relay, p.value());
      },
      [=](written_atom) { retry_parked(self, *cfg); },
      [=](recheck_atom) {
        self->state.recheck_due = false;
        retry_parked(self, *cfg);
        schedule_recheck(self);
      },
  };
}

}  // namespace

attention_server_actor spawn_attention_server(caf::actor_system& sys, attention_server_config config) {
  return sys.spawn<caf::detached>(attention_server_behavior, std::move(config));
}

void attention_servers::accept(instance_id from, std::vector<uint8_t> bytes) const {
  const attention_server_actor& to = is_decode_attend(bytes) ? decode : prefill;
  caf::anon_send(to, incoming_attend{from, std::move(bytes)});
}

attention_servers spawn_attention_servers(caf::actor_system& sys, attention_server_config config,
                                          std::shared_ptr<gpu::backend> decode_device) {
  attention_server_config decode = config;
  decode.device = std::move(decode_device);
  decode.watches_writes = false;  // its attends name no blocks, so none waits for a write
  return {spawn_attention_server(sys, std::move(decode)), spawn_attention_server(sys, std::move(config))};
}

}  // namespace illm::actors
