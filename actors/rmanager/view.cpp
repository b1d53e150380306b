// The rManager's view of the cluster: it joins the gManager, sends a heartbeat every period and adopts the
// view that answers it (connecting the data plane to new peers, releasing what departed owners kept here),
// and hears when a data-plane peer fails.
#include <algorithm>

#include <fmt/format.h>

#include "actors/rmanager/state.hpp"

namespace illm::actors::rmanager_impl {

namespace {

/// Notes that the endpoint to `peer` at `address` failed: it is tried again after a pause.
void note_failed(rmanager_state& st, instance_id peer, const std::vector<uint8_t>& address) {
  failed_peer& f = st.failed[peer];
  if (f.address != address) f.pause = std::chrono::milliseconds(0);
  f.address = address;
  f.pause = std::clamp(f.pause * 2, std::chrono::milliseconds(500), std::chrono::milliseconds(30000));
  f.retry_at = std::chrono::steady_clock::now() + f.pause;
  st.connected.erase(peer);
}

/// Connects the data plane to every peer of the view that has an address and is not connected at it yet; a
/// peer that failed at that address only once its pause is over (failed_peer).
void connect_peers(rmanager_state& st) {
  if (!st.config.connect_peer) return;
  const auto now = std::chrono::steady_clock::now();
  for (const instance_view& i : st.view.instances) {
    if (i.inst_id == st.config.id || i.plane_address.empty()) continue;
    if (auto c = st.connected.find(i.inst_id); c != st.connected.end() && c->second == i.plane_address) continue;
    if (auto f = st.failed.find(i.inst_id); f != st.failed.end() && f->second.address == i.plane_address &&
                                            now < f->second.retry_at)
      continue;
    const std::string why = st.config.connect_peer(i.inst_id, i.plane_address);
    if (why.empty()) {
      st.connected[i.inst_id] = i.plane_address;
      plane_log(st, fmt::format("rmanager {}: data plane connected to instance {}", st.config.id, i.inst_id));
    } else {
      note_failed(st, i.inst_id, i.plane_address);
      plane_log(st, fmt::format("rmanager {}: data plane cannot connect to instance {}: {}", st.config.id, i.inst_id, why));
    }
  }
}

/// Owners that were members of the views since the last settled one and that a settled view leaves out (they
/// left, or died; one only silent for a while stays a member): nobody will attend or release the blocks kept
/// here for their requests, nor fill their rooms, unless a new owner takes a request over: they wait a lease
/// for it (keep_orphans). A view that is not settled (its gManager
/// started lately) releases nothing: a member it leaves out may not have joined it yet.
void release_departed(self_ptr self, const cluster_view& next) {
  auto& st = self->state;
  for (instance_id id : next.members) st.known_members.insert(id);
  if (!next.settled) return;
  for (instance_id gone : st.known_members) {
    if (gone == st.config.id || next.has_member(gone)) continue;
    std::set<request_id> requests;
    for (uint64_t req : st.config.hosted->requests_of(gone)) requests.insert(req);
    for (uint64_t req : st.config.promises->requests_of(gone)) requests.insert(req);
    for (const auto& [id, move] : st.incoming)  // replicas kept here
      if (move.replica && move.src == gone && move.stage == incoming_move::state::committed) requests.insert(move.req);
    keep_orphans(self, gone, requests);
  }
  st.known_members = {next.members.begin(), next.members.end()};
}

/// Whether `v`, an answer of the gManager `from`, should replace the view: it comes from the gManager this
/// rManager reports to now, and it is no older than the view when both come from the same one.
bool current(self_ptr self, const gmanager_actor& from, const cluster_view& v) {
  const auto& st = self->state;
  if (from != st.config.gmanager) return false;  // a late answer of a gManager this one left
  return v.epoch != st.view.epoch || v.version >= st.view.version;
}

}  // namespace

/// A newer view: keep it, release what departed owners kept here, and connect to its new peers.
void adopt_view(self_ptr self, cluster_view v) {
  release_departed(self, v);
  if (const instance_view* me = v.find(self->state.config.id); me && me->cache_resync) self->state.cache_resync = true;
  auto& known = self->state.member_rmanagers;
  for (const instance_view& i : v.instances)
    if (i.rmanager) known[i.inst_id] = i.rmanager;
  if (v.settled) std::erase_if(known, [&v](const auto& m) { return !v.has_member(m.first); });
  self->state.view = std::move(v);
  self->state.room_refused.clear();
  connect_peers(self->state);
  if (auto& nodes = self->state.config.nodes) {
    std::map<uint32_t, std::string> where;
    for (const instance_view& i : self->state.view.instances) where[i.inst_id] = i.node;
    std::set<uint32_t> members(self->state.view.members.begin(), self->state.view.members.end());
    for (const auto& m : known) members.insert(m.first);  // not yet pruned: a settled view prunes them
    nodes->update(std::move(where), std::move(members));
  }
  if (self->state.config.on_view) self->state.config.on_view(self->state.view);
}

/// Sends `hb` to the gManager; its answer, the view, is adopted if it is still current.
void request_view(self_ptr self, heartbeat hb) {
  auto& st = self->state;
  if (!st.config.gmanager) return;
  self->request(st.config.gmanager, st.config.answer_timeout, std::move(hb))
      .then(
          [=, gm = st.config.gmanager](cluster_view& v) {
            if (!current(self, gm, v)) return;
            adopt_view(self, std::move(v));
            if (self->state.instance) self->send(self->state.instance, self->state.view);
          },
          [=](const caf::error&) {});  // the next period tries again; instances keep serving meanwhile
}

void send_heartbeat(self_ptr self) {
  auto& st = self->state;
  self->delayed_send(self, st.config.heartbeat_period, heartbeat_tick_atom::value);
  if (!st.failed.empty()) connect_peers(st);  // peers whose pause is over, even without a gManager
  maybe_replicate(self);
  if (++st.ticks % 64 == 0) forget_finished_moves(self);
  if (!st.config.gmanager) return;
  heartbeat hb{st.config.id, ++st.heartbeat_seq, st.stats(), st.placement.placement, {}, st.cache_reported};
  // The cache's changes since the last heartbeat (one lost on the way makes the gManager ask for every key).
  hb.cache = st.config.prefix_cache ? st.config.prefix_cache->take_changes(std::exchange(st.cache_resync, false))
                                    : gpu::prefix_changes{true, {}, {}};
  st.cache_reported = hb.seq;
  if (auto* m = st.config.metrics.get()) {
    const metrics::label_values instance{std::to_string(st.config.id)};
    m->blocks_hosted.with(instance).set(hb.stats.hosted_blocks);
    m->blocks_borrowed.with(instance).set(hb.stats.borrowed_blocks);
    m->replica_blocks.with(instance).set(st.config.pool->spare_blocks(gpu::spare_user::replicas));
  }
  switch (st.config.faults ? st.config.faults->draw(faults::control_point::heartbeat) : faults::fate::pass) {
    case faults::fate::pass: return request_view(self, std::move(hb));
    case faults::fate::drop: return;
    case faults::fate::duplicate:
      request_view(self, hb);
      return request_view(self, std::move(hb));
    case faults::fate::delay:
      return defer(self, st.config.faults->delay(), [self, hb]() mutable { request_view(self, std::move(hb)); });
  }
}

/// Joins the gManager, with the instance actor once it is attached (the gManager takes the second join as
/// an update). A refusal (the id is taken) is logged; the gManager ignores this rManager's heartbeats then.
void join(self_ptr self) {
  auto& st = self->state;
  if (!st.config.gmanager) return;
  self->request(st.config.gmanager, st.config.answer_timeout,
                join_cluster{st.config.id, rmanager_actor{self}, st.instance, st.stats(), st.config.plane_address,
                             st.config.node, st.config.control, st.view.epoch, st.view.members, st.config.kv})
      .then(
          [=, gm = st.config.gmanager](cluster_view& v) {
            if (current(self, gm, v)) adopt_view(self, std::move(v));
          },
            [=](const caf::error& e) {
              if (e == caf::sec::request_timeout) return;  // heartbeats go on; the gManager may be slow
              plane_log(self->state, fmt::format("rmanager {}: join refused: {}", self->state.config.id,
                                                 self->system().render(e)));
            });
}

void switch_gmanager(self_ptr self, gmanager_actor gm) {
  auto& st = self->state;
  if (gm == st.config.gmanager) return;
  plane_log(st, fmt::format("rmanager {}: joining the gManager {}", st.config.id, gm ? "reached now" : "(none)"));
  st.config.gmanager = std::move(gm);
  join(self);
}

void on_peer_failed(self_ptr self, const peer_failed& p) {
  auto& st = self->state;
  plane_log(st, fmt::format("rmanager {}: data plane peer {} failed: {}", st.config.id, p.peer, p.reason));
  if (auto c = st.connected.find(p.peer); c != st.connected.end()) note_failed(st, p.peer, std::vector<uint8_t>(c->second));
  std::vector<move_id> doomed;
  for (const auto& [id, move] : st.outgoing)
    if (move.dst == p.peer) doomed.push_back(id);
  for (move_id id : doomed) finish_move(self, id, false, "data plane peer failed: " + p.reason);
  for (auto c = st.chunks.begin(); c != st.chunks.end();)  // the instance hears it from its chunk's holder
    c = c->second.dst == p.peer ? st.chunks.erase(c) : std::next(c);
}

}  // namespace illm::actors::rmanager_impl
