// The rManager actor: the composition of its behaviour from the protocol files listed in state.hpp.
#include <cstdio>

#include <fmt/format.h>

#include "actors/faults/hang.hpp"
#include "actors/rmanager/state.hpp"

namespace illm::actors {
namespace rmanager_impl {

void plane_log(const rmanager_state& st, const std::string& line) {
  if (st.config.log) return st.config.log(line);
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

/// Whether the data plane reaches `peer` (always, for an in-process plane).
bool reachable(const rmanager_state& st, instance_id peer) {
  return !st.config.connect_peer || st.connected.count(peer) > 0;
}

std::optional<rmanager_actor> rmanager_of(self_ptr self, instance_id id) {
  if (id == self->state.config.id) return rmanager_actor{self};
  if (const instance_view* i = self->state.view.find(id); i && i->rmanager) return i->rmanager;
  if (auto it = self->state.member_rmanagers.find(id); it != self->state.member_rmanagers.end()) return it->second;
  return std::nullopt;
}

void defer(self_ptr self, std::chrono::milliseconds delay, std::function<void()> action) {
  const uint64_t id = self->state.next_deferred++;
  self->state.deferred[id] = std::move(action);
  self->delayed_send(self, delay, deferred_atom::value, id);
}

bool crashes_at(self_ptr self, faults::crash_point point) {
  const auto& faults = self->state.config.faults;
  if (!faults || !faults->crash_now(point)) return false;
  plane_log(self->state, fmt::format("rmanager {}: FAULT INJECTED: crash at {}", self->state.config.id,
                                     faults::to_string(point)));
  faults::crash_as_told(self->state.config.crash);
  self->quit(caf::exit_reason::kill);
  return true;
}

namespace {

rmanager_actor::behavior_type rmanager_behavior(self_ptr self, rmanager_config config) {
  if (!config.promises) config.promises = std::make_shared<pool_promises>();
  faults::silent_when_told(self);
  self->state.config = std::move(config);
  // The pool tells it which spare blocks (replicas kept here) an allocation took, while it lives.
  caf::weak_actor_ptr me{self->ctrl()};
  self->state.config.pool->set_reclaim_listener(gpu::spare_user::replicas, [me](const std::vector<gpu::spare_block>& taken) {
    spare_reclaimed r;
    for (const gpu::spare_block& s : taken) {
      r.blocks.push_back(s.block);
      r.generations.push_back(s.generation);
    }
    if (caf::strong_actor_ptr rmanager = me.lock())
      rmanager->enqueue(nullptr, caf::make_message_id(), caf::make_message(std::move(r)), nullptr);
  });
  join(self);
  self->send(self, heartbeat_tick_atom::value);
  return {
      // view: the instance attached, heartbeats, views, peers
      [=](attach_atom, instance_actor instance) {
        self->state.instance = std::move(instance);
        join(self);
      },
      [=](heartbeat_tick_atom) { send_heartbeat(self); },
      [=](cluster_view& v) { adopt_view(self, std::move(v)); },
      [=](const peer_failed& p) { on_peer_failed(self, p); },
      [=](const drain_instance&) { self->state.draining = true; },
      [=](placement_update& p) {
        self->state.placement = std::move(p);
        self->state.check_promises();
      },
      [=](caf::get_atom) { return self->state.stats(); },
      [=](use_gmanager& u) { switch_gmanager(self, std::move(u.gmanager)); },
      [=](view_atom) { return self->state.view; },
      [=](deferred_atom, uint64_t id) {
        auto it = self->state.deferred.find(id);
        if (it == self->state.deferred.end()) return;
        auto action = std::move(it->second);
        self->state.deferred.erase(it);
        action();
      },
      // move source: orders, loans, the copy's completions
      [=](const move_kvcache& m) { order_move(self, m); },
      [=](const need_blocks& n) { start_loan(self, n); },
      [=](const transfer_done& d) { on_transfer(self, d); },
      // move destination
      [=](const try_move_kvcache& t) -> caf::result<move_reservation> {
        if (!within_limits(self, over_limit(self->state, t))) {
          move_reservation refused;
          refused.id = t.id;
          refused.dst_inst = self->state.config.id;
          refused.reason = "beyond a limit of the protocol";
          return refused;
        }
        return answer<move_reservation>(self, faults::control_point::reply, [=] { return grant(self, t); });
      },
      [=](const commit_move& c) -> caf::result<commit_result> {
        if (!within_limits(self, over_limit(self->state, c))) return commit_result{c.id, false, "beyond a limit"};
        return answer<commit_result>(self, faults::control_point::reply, [=] { return accept_commit(self, c); });
      },
      [=](const abort_move& a) { on_abort_move(self, a); },
      [=](lease_check_atom, move_id id) { on_lease_check(self, id); },
      [=](const take_reservation& t) { return take_for_chunk(self, t); },
      [=](const return_reservation& r) { chunk_returned(self, r.id); },
      [=](const release_blocks& r) { release_hosted(self, r); },
      // rooms and releases
      [=](const keep_blocks& k) -> caf::result<uint32_t> {
        if (!within_limits(self, over_limit(self->state, k))) return uint32_t(0);
        return answer<uint32_t>(self, faults::control_point::promise, [=] { return keep(self, k); });
      },
      [=](reserve_room& r) {
        r.owner = self->state.config.id;
        ask_room(self, r);
      },
      [=](const request_released& r) { release_everywhere(self, r.req_id, r.kept); },
      // chunk reservations
      [=](const reserve_chunk& c) { return reserve_for_chunk(self, c); },
      [=](const commit_chunk& c) { return commit_written_chunk(self, c); },
      [=](const abort_chunk& a) { abort_outgoing_chunk(self, a.id); },
      // replicas
      [=](const replicate_blocks& r) -> caf::result<replica_result> {
        if (!within_limits(self, over_limit(self->state, r))) return replica_result{r.id, false, "beyond a limit"};
        return copy_replica(self, r);
      },
      [=](const replicas_lost& r) {
        if (within_limits(self, over_limit(self->state, r))) on_replicas_lost(self, r);
      },
      [=](const spare_reclaimed& r) { on_spare_reclaimed(self, r); },
      [=](const promote_replicas& p) -> caf::result<replicas_promoted> {
        if (!within_limits(self, over_limit(self->state, p))) return replicas_promoted{false, "beyond a limit", {}};
        return promote(self, p);
      },
      // owner takeover
      [=](const take_over& t) { return take_over_request(self, t); },
      // the cluster-wide prefix cache: prefixes found for its requests, read here for peers'
      [=](const find_prefix& f) { return find_shared_prefix(self, f); },
      [=](const read_prefix& r) -> caf::result<prefix_read> {
        if (!within_limits(self, over_limit(self->state, r))) return prefix_read{};
        return answer<prefix_read>(self, faults::control_point::reply, [=] { return read_for_peer(self, r); });
      },
      [=](const copy_prefix& c) -> caf::result<replica_result> {
        if (!within_limits(self, over_limit(self->state, c))) return replica_result{c.id, false, "beyond a limit"};
        return copy_cached_run(self, c);
      },
      [=](const report_orphan& r) { return report(self, r); },
      [=](const adopt_orphan& a) -> caf::result<orphan_adopted> {
        if (!within_limits(self, over_limit(self->state, a))) return orphan_adopted{false, "beyond a limit", {}};
        return adopt(self, a);
      },
  };
}

}  // namespace
}  // namespace rmanager_impl

rmanager_actor spawn_rmanager(caf::actor_system& sys, rmanager_config config) {
  return sys.spawn(rmanager_impl::rmanager_behavior, std::move(config));
}

}  // namespace illm::actors
