#include "actors/gmanager.hpp"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>

#include <fmt/format.h>

#include "actors/placement/prefix_index.hpp"

namespace illm::actors {

namespace {

/// One member as the gManager knows it.
struct member {
  rmanager_actor rmanager;
  instance_actor instance;
  instance_stats stats;
  std::vector<uint8_t> plane_address;
  std::string node;
  control_endpoint control;
  std::vector<request_placement_entry> placement;
  uint64_t last_seq = 0;
  caf::actor_clock::time_point last_heard;
  bool draining = false;
  gpu::kv_identity kv;
};

/// A long request waiting for its room, when its owner last asked, and since when it waits.
struct waiting_room {
  instance_id owner = 0;
  request_id req = 0;
  uint32_t blocks = 0;
  caf::actor_clock::time_point asked, since;
};

}  // namespace

struct gmanager_state {
  gmanager_config config;
  std::map<instance_id, member> members;
  /// Rooms of long requests: (owner, request) -> per holder, the blocks and the holder's heartbeat then.
  std::map<std::pair<instance_id, request_id>, std::map<instance_id, std::pair<uint32_t, uint64_t>>> rooms;
  std::map<move_id, std::pair<instance_id, caf::actor_clock::time_point>> ordered;  // orders not yet reported
  /// The oldest long request refused a room: the members hold blocks back for it (instance_view::held_for_room)
  /// and younger long requests wait, so that later requests cannot take the blocks it waits for forever (only
  /// smaller rooms that fit now go first, for room_pass_limit).
  std::optional<waiting_room> waiting;
  std::deque<move_report> reports;  // the latest move reports, for (moves_atom, request)
  uint64_t moves_done = 0, moves_refused = 0;  // reports so far, for the status
  std::deque<member_status> departed;           // members that left or went down lately, newest last
  uint64_t version = 0;  // counts changes within config.epoch
  /// Members of an earlier gManager join this one: it rebuilds membership until every member they knew has
  /// joined too, or until a heartbeat timeout after the last of their joins (one that died meanwhile never does).
  std::set<instance_id> expected;
  caf::actor_clock::time_point rebuild_until;
  /// Move ids stay below 2^40 (the rManagers' own start there) and differ between epochs: the low 16 bits of
  /// the epoch's second, then a count, so that a restarted gManager's orders never meet an earlier one's ids.
  uint64_t next_move = 1;
  /// rManagers expelled for breaking a limit of the protocol, and why: their joins are refused.
  std::map<caf::actor_addr, std::string> expelled;
  placement::prefix_index prefixes;  ///< the members' prefix caches, from their heartbeats
  static inline const char* name = "gmanager";
};

namespace {

using self_ptr = gmanager_actor::stateful_pointer<gmanager_state>;

void tell(self_ptr self, membership_event e) {
  if (self->state.config.on_membership) self->state.config.on_membership(e);
}

/// Whether this gManager knows every live member: it started a cluster afresh, or every member that the members
/// of an earlier gManager knew has joined it (or had a heartbeat timeout to do so).
bool settled(self_ptr self) {
  auto& st = self->state;
  if (st.expected.empty()) return true;
  const bool all_joined = std::all_of(st.expected.begin(), st.expected.end(),
                                      [&](instance_id id) { return st.members.count(id) > 0; });
  if (all_joined || self->clock().now() >= st.rebuild_until) st.expected.clear();
  return st.expected.empty();
}

bool alive(self_ptr self, const member& m) {
  return self->clock().now() - m.last_heard <= self->state.config.heartbeat_timeout;
}

/// Blocks granted to rooms on `holder` that its heartbeats may not show yet (the holder promises them when
/// the owner asks, after the grant: two heartbeats later its spare count leaves them out).
uint32_t reserved_on(const gmanager_state& st, instance_id holder) {
  auto m = st.members.find(holder);
  if (m == st.members.end()) return 0;
  uint32_t n = 0;
  for (const auto& [key, holders] : st.rooms)
    if (auto h = holders.find(holder); h != holders.end() && m->second.last_seq <= h->second.second + 1)
      n += h->second.first;
  return n;
}

/// A member's spare blocks less those granted to rooms that its heartbeats do not show promised yet.
uint32_t unreserved_free(const gmanager_state& st, instance_id id, const member& m) {
  return m.stats.free_blocks - std::min(m.stats.free_blocks, reserved_on(st, id));
}

/// Whether a member may hold blocks for others' rooms.
bool may_hold(self_ptr self, instance_id id, const member& m, instance_id owner) {
  return id != owner && alive(self, m) && !m.draining && !m.stats.draining;
}

/// The waiting room, unless its owner stopped asking (it asks again after every view while it waits).
const waiting_room* current_waiting(self_ptr self) {
  auto& st = self->state;
  if (st.waiting && self->clock().now() - st.waiting->asked > st.config.heartbeat_timeout) st.waiting.reset();
  return st.waiting ? &*st.waiting : nullptr;
}

/// Blocks each member holds back for the waiting room: first what is spare now, on the members with the most,
/// then what is still missing, spread by the pools' other blocks.
std::map<instance_id, uint32_t> held_for_room(self_ptr self) {
  std::map<instance_id, uint32_t> held;
  const waiting_room* w = current_waiting(self);
  if (!w) return held;
  const auto& st = self->state;
  std::vector<std::pair<uint32_t, instance_id>> spare;
  for (const auto& [id, m] : st.members)
    if (may_hold(self, id, m, w->owner)) spare.push_back({unreserved_free(st, id, m), id});
  std::sort(spare.rbegin(), spare.rend());
  uint32_t left = w->blocks;
  uint64_t rest = 0;
  for (const auto& [free, id] : spare) {
    held[id] = std::min(free, left);
    left -= held[id];
    rest += st.members.at(id).stats.total_blocks - held[id];
  }
  if (left == 0 || rest == 0) return held;
  for (auto& [id, n] : held) {
    const uint64_t others = st.members.at(id).stats.total_blocks - n;
    n += uint32_t(std::min<uint64_t>(others, (uint64_t(left) * others + rest - 1) / rest));
  }
  return held;
}

cluster_view view_of(self_ptr self) {
  const auto& st = self->state;
  cluster_view v;
  v.epoch = st.config.epoch;
  v.version = st.version;
  v.settled = settled(self);
  const auto held = held_for_room(self);
  for (const auto& [id, m] : st.members) {
    v.members.push_back(id);
    v.member_blocks += m.stats.total_blocks;
  }
  for (const auto& [id, m] : st.members)
    if (alive(self, m))
      v.instances.push_back({id, m.stats.total_blocks, unreserved_free(st, id, m), m.draining || m.stats.draining,
                             m.rmanager, m.instance, m.plane_address, held.count(id) ? held.at(id) : 0, m.node,
                             m.control, m.stats.replica_blocks, st.prefixes.needs_full(id), m.stats.cache_root,
                             m.stats.cache_shared, m.kv, m.stats.waiting_blocks});
  return v;
}

/// `blocks` over members with (spare, id) as evenly as their spare allows: each holder takes the same share,
/// or all its spare when that is less. A long prefill's attention then splits evenly over its holders, and
/// the one with the most blocks, which every step waits for, has as few as can be.
std::vector<std::pair<instance_id, uint32_t>> spread_room(std::vector<std::pair<uint32_t, instance_id>> spare,
                                                         uint32_t blocks) {
  std::sort(spare.begin(), spare.end());  // the least spare first: they fill up before the level
  std::map<instance_id, uint32_t> takes;
  uint32_t left = blocks;
  for (size_t i = 0; i < spare.size(); ++i) {
    const auto [free, id] = spare[i];
    const size_t holders_left = spare.size() - i;
    const uint32_t share = uint32_t((uint64_t(left) + holders_left - 1) / holders_left);
    takes[id] = std::min(free, share);
    left -= takes[id];
  }
  std::vector<std::pair<instance_id, uint32_t>> out;
  for (const auto& [id, take] : takes)
    if (take > 0) out.push_back({id, take});
  return out;
}

/// Keeps blocks for a long request on the members with the most unreserved spare blocks, or none at all. The
/// oldest request refused comes first: a younger one has a room only when both would fit, or, for the oldest's
/// first room_pass_limit of waiting, when its own room is no larger and fits (so the cluster works while the
/// blocks the oldest waits for free up); until the oldest has its room the members hold blocks back for it
/// (held_for_room in the view).
room_answer reserve(self_ptr self, const reserve_room& r) {
  auto& st = self->state;
  room_answer a{r.req_id, false, {}, {}};
  if (!settled(self)) {
    a.reason = "the gManager started lately and is still hearing from the members";
    return a;
  }
  if (st.rooms.count({r.owner, r.req_id})) {  // a repeated ask: the same room
    a.granted = true;
    for (const auto& [holder, kept] : st.rooms[{r.owner, r.req_id}]) a.holders.push_back({holder, kept.first});
    return a;
  }
  std::vector<std::pair<uint32_t, instance_id>> spare;
  uint64_t total = 0;
  for (const auto& [id, m] : st.members)
    if (may_hold(self, id, m, r.owner))
      if (const uint32_t free = unreserved_free(st, id, m); free > 0) {
        spare.push_back({free, id});
        total += free;
      }
  const waiting_room* older = current_waiting(self);
  const bool younger = older && (older->owner != r.owner || older->req != r.req_id);
  const auto now = self->clock().now();
  const bool passes = younger && r.num_blocks <= older->blocks && now - older->since < st.config.room_pass_limit;
  if (younger && !passes && total < uint64_t(older->blocks) + r.num_blocks) {
    a.reason = fmt::format("request {} of instance {} waits for room first", older->req, older->owner);
    return a;
  }
  if (total < r.num_blocks) {
    a.reason = "the cluster has " + std::to_string(total) + " spare blocks now";
    if (!younger) st.waiting = waiting_room{r.owner, r.req_id, r.num_blocks, now, older ? older->since : now};
    ++st.version;  // the members hold blocks back for it from the next view on
    return a;
  }
  if (older && older->owner == r.owner && older->req == r.req_id) st.waiting.reset();
  auto& room = st.rooms[{r.owner, r.req_id}];
  for (const auto& [id, take] : spread_room(spare, r.num_blocks)) {
    room[id] = {take, st.members[id].last_seq};
    a.holders.push_back({id, take});
  }
  a.granted = true;
  ++st.version;
  return a;
}

/// Keeps a move report for (moves_atom, request), the latest max_kept_reports of them.
void keep_report(gmanager_state& st, const move_report& r) {
  constexpr size_t max_kept_reports = 100000;
  st.reports.push_back(r);
  if (st.reports.size() > max_kept_reports) st.reports.pop_front();
}

std::vector<move_report> reports_of(const gmanager_state& st, request_id req) {
  std::vector<move_report> out;
  for (const move_report& r : st.reports)
    if (r.req_id == req) out.push_back(r);
  return out;
}

/// Keeps a member that left or went down for the status, the latest max_kept_departed of them.
void keep_departed(gmanager_state& st, instance_id id, const member& m, const char* state, std::string reason) {
  constexpr size_t max_kept_departed = 16;
  std::erase_if(st.departed, [id](const member_status& d) { return d.inst_id == id; });
  st.departed.push_back({id, state, m.node, std::move(reason), m.stats, 0});
  if (st.departed.size() > max_kept_departed) st.departed.pop_front();
}

/// The requests of the placement map, each with its owner and where its blocks are.
std::vector<request_status> requests_of(const gmanager_state& st) {
  std::map<request_id, request_status> by_id;
  for (const auto& [id, m] : st.members)
    for (const request_placement_entry& e : m.placement) {
      request_status& r = by_id[e.req_id];
      r.req_id = e.req_id;
      r.owner = id;
      r.blocks.push_back(e);
    }
  std::vector<request_status> out;
  for (auto& [id, r] : by_id) out.push_back(std::move(r));
  return out;
}

/// What a status page shows: the members (alive, draining, silent) and those gone lately, the requests and
/// where their blocks are, and the latest moves.
cluster_status status_of(self_ptr self) {
  constexpr size_t moves_shown = 32;
  const auto& st = self->state;
  cluster_status s{st.config.epoch, st.version, settled(self), {}, requests_of(st), {}, st.moves_done, st.moves_refused};
  const auto now = self->clock().now();
  for (const auto& [id, m] : st.members) {
    const bool heard = alive(self, m), draining = m.draining || m.stats.draining;
    const auto ago = std::chrono::duration_cast<std::chrono::milliseconds>(now - m.last_heard).count();
    s.members.push_back({id, !heard ? "down" : draining ? "draining" : "alive", m.node,
                         heard ? "" : "no heartbeat lately", m.stats, uint32_t(std::clamp<int64_t>(ago, 0, UINT32_MAX))});
  }
  for (const member_status& d : st.departed)
    if (!st.members.count(d.inst_id)) s.members.push_back(d);
  const size_t first = st.reports.size() - std::min(st.reports.size(), moves_shown);
  s.moves.assign(st.reports.begin() + std::ptrdiff_t(first), st.reports.end());
  return s;
}

void update_membership_metrics(self_ptr self) {
  auto* m = self->state.config.metrics.get();
  if (!m) return;
  int alive_count = 0;
  for (const auto& [id, member] : self->state.members) {
    m->heartbeat_age.with({std::to_string(id)})
        .set(std::chrono::duration<double>(self->clock().now() - member.last_heard).count());
    alive_count += alive(self, member);
  }
  m->instances_alive.with().set(alive_count);
}

/// Sends a move order, or loses, doubles or delays it as the injected faults say (gmanager_config::faults).
void send_order(self_ptr self, const rmanager_actor& to, const move_kvcache& order) {
  const auto& faults = self->state.config.faults;
  switch (faults ? faults->draw(faults::control_point::order) : faults::fate::pass) {
    case faults::fate::pass: return self->send(to, order);
    case faults::fate::drop: return;  // the source never hears of it; the order expires here
    case faults::fate::duplicate:
      self->send(to, order);
      return self->send(to, order);
    case faults::fate::delay: return self->delayed_send(to, faults->delay(), order);
  }
}

/// The planned crash: the process's hook, then the actor ends as a killed one would.
void crash(self_ptr self) {
  std::fprintf(stderr, "illm gmanager: FAULT INJECTED: crash after sending move orders\n");
  faults::crash_as_told(self->state.config.crash);
  self->quit(caf::exit_reason::kill);
}

void run_policy(self_ptr self) {
  auto& st = self->state;
  self->delayed_send(self, st.config.policy_period, policy_tick_atom::value);
  update_membership_metrics(self);
  if (!st.config.policy || !settled(self)) return;  // no placement on a partial map
  // A member's spare blocks, less those granted to rooms and those it holds back for the waiting room: the
  // members refuse moves into those, so the policy plans none.
  const auto held = held_for_room(self);
  std::vector<placement::instance_snapshot> snapshot;
  for (const auto& [id, m] : st.members)
    if (alive(self, m)) {
      placement::instance_snapshot s{id, m.stats, m.placement};
      s.stats.draining = s.stats.draining || m.draining;
      const uint32_t free = unreserved_free(st, id, m), kept_back = held.count(id) ? held.at(id) : 0;
      s.stats.free_blocks = free - std::min(free, kept_back);
      snapshot.push_back(std::move(s));
    }
  // One order at a time per source: the next waits for the report of the last (or for it to be lost).
  const auto now = self->clock().now();
  for (auto it = st.ordered.begin(); it != st.ordered.end();)
    it = now - it->second.second > st.config.heartbeat_timeout ? st.ordered.erase(it) : std::next(it);
  auto busy = [&](instance_id src) {
    return std::any_of(st.ordered.begin(), st.ordered.end(), [&](const auto& o) { return o.second.first == src; });
  };
  bool ordered = false;
  for (const placement::move_order& o : st.config.policy(snapshot)) {
    auto src = st.members.find(o.src);
    if (src == st.members.end() || !st.members.count(o.dst) || o.num_blocks == 0 || busy(o.src)) continue;
    const move_id id = st.next_move++;
    st.ordered[id] = {o.src, now};
    send_order(self, src->second.rmanager, move_kvcache{id, o.req, o.num_blocks, o.dst});
    ordered = true;
  }
  if (ordered && st.config.faults && st.config.faults->crash_now(faults::crash_point::after_order)) crash(self);
}

/// A new member, or a member's second join (with its instance actor). An id already held by another live
/// rManager is refused: two instances with one id would get each other's moves and requests.
caf::result<cluster_view> on_join(self_ptr self, const join_cluster& j) {
  auto& st = self->state;
  if (auto held = st.members.find(j.inst_id); held != st.members.end() && held->second.rmanager &&
                                                held->second.rmanager != j.rmanager)
    return caf::make_error(caf::sec::invalid_argument,
                           "instance id " + std::to_string(j.inst_id) + " is already in the cluster");
  if (auto it = st.expelled.find(j.rmanager.address()); it != st.expelled.end())
    return caf::make_error(caf::sec::invalid_argument, "instance " + std::to_string(j.inst_id) + " was " + it->second);
  for (const auto& [id, other] : st.members)
    if (id != j.inst_id && other.rmanager)
      if (std::string why = other.kv.mismatch(j.kv); !why.empty())
        return caf::make_error(caf::sec::invalid_argument,
                               fmt::format("instance {} cannot join the cluster: its pool holds {} (member instance {})",
                                           j.inst_id, why, id));
  const bool is_new = !st.members.count(j.inst_id);
  if (j.known_epoch != 0 && j.known_epoch != st.config.epoch) {  // a member of a gManager before this one
    st.expected.insert(j.known_members.begin(), j.known_members.end());
    st.rebuild_until = self->clock().now() + st.config.heartbeat_timeout;
  }
  member& m = st.members[j.inst_id];
  if (m.rmanager != j.rmanager) self->monitor(j.rmanager);
  if (is_new) tell(self, {membership_event::kind::joined, j.inst_id, {}, {}, {}});
  m.rmanager = j.rmanager;
  if (j.instance) m.instance = j.instance;
  if (!j.plane_address.empty()) m.plane_address = j.plane_address;
  m.node = j.node;
  m.control = j.control;
  m.kv = j.kv;
  m.stats = j.stats;
  m.last_heard = self->clock().now();
  ++st.version;
  return view_of(self);
}

cluster_view on_heartbeat(self_ptr self, heartbeat& hb) {
  auto& st = self->state;
  auto it = st.members.find(hb.inst_id);
  // A duplicate or late one changes nothing, nor one from an rManager whose join with this id was refused.
  if (it != st.members.end() && hb.seq > it->second.last_seq &&
      self->current_sender() == it->second.rmanager.address()) {
    it->second.last_seq = hb.seq;
    it->second.stats = hb.stats;
    it->second.placement = std::move(hb.placement);
    it->second.last_heard = self->clock().now();
    st.prefixes.apply(hb.inst_id, hb.seq, hb.cache_base, hb.cache);
    ++st.version;
  }
  return view_of(self);
}

/// The members whose caches hold the first of `l`'s keys, and how many of them (a member of this view only).
prefix_holders holders_of(const gmanager_state& st, const prefix_lookup& l) {
  prefix_holders out;
  if (auto* m = st.config.metrics.get()) m->prefix_index_lookups.with().add();
  for (const auto& [member, blocks] : st.prefixes.lookup(l.keys)) {
    if (!st.members.count(member)) continue;
    out.holders.push_back(member);
    out.blocks.push_back(blocks);
  }
  for (const placement::prefix_segment& s : st.prefixes.cover(l.keys)) {
    if (!st.members.count(s.holder)) break;
    out.cover.push_back(s);
  }
  return out;
}

/// A member left: its rooms go, and it keeps no blocks for others' rooms any more.
void forget_rooms_of(gmanager_state& st, instance_id id) {
  if (st.waiting && st.waiting->owner == id) st.waiting.reset();
  for (auto it = st.rooms.begin(); it != st.rooms.end();) {
    it->second.erase(id);
    it = it->first.first == id ? st.rooms.erase(it) : std::next(it);
  }
}

/// A member is gone (its rManager died, or it was expelled): its requests (and others' blocks hosted on it) are
/// reported, never silently forgotten; its rooms go.
void drop_member(self_ptr self, std::map<instance_id, member>::iterator it, std::string reason) {
  auto& members = self->state.members;
  membership_event e{membership_event::kind::down, it->first, std::move(reason), {}, {}};
  for (const auto& p : it->second.placement)
    if (std::find(e.lost_requests.begin(), e.lost_requests.end(), p.req_id) == e.lost_requests.end())
      e.lost_requests.push_back(p.req_id);
  for (const auto& [id, other] : members)
    for (const auto& p : other.placement)
      if (id != it->first && p.inst_id == it->first && !p.local &&
          std::find(e.lost_hosted.begin(), e.lost_hosted.end(), p.req_id) == e.lost_hosted.end())
        e.lost_hosted.push_back(p.req_id);
  keep_departed(self->state, it->first, it->second, "down", e.reason);
  tell(self, std::move(e));
  forget_rooms_of(self->state, it->first);
  self->state.prefixes.drop(it->first);
  members.erase(it);
  ++self->state.version;
}

/// Members silent longer than dead_after are declared dead: nothing else may tell (a hung process, a cut network),
/// so their missing heartbeats are the sign. Not while the view is being rebuilt (a member of an earlier gManager
/// may not have reported yet).
void drop_silent(self_ptr self) {
  if (!settled(self)) return;
  const auto now = self->clock().now();
  auto& members = self->state.members;
  for (auto it = members.begin(); it != members.end();) {
    const auto silent = now - it->second.last_heard;
    auto next = std::next(it);
    if (silent > self->state.config.dead_after)
      drop_member(self, it, fmt::format("no heartbeat for {} ms", std::chrono::duration_cast<std::chrono::milliseconds>(silent).count()));
    it = next;
  }
}

/// A member reported that `e.offender` broke a limit: it leaves the cluster and may not join this gManager again
/// (a report from an rManager that is no member is ignored).
void expel(self_ptr self, const expel_member& e) {
  auto& members = self->state.members;
  auto reporter = members.find(e.reporter);
  if (reporter == members.end() || reporter->second.rmanager.address() != self->current_sender()) return;
  auto offender = members.find(e.offender);
  if (offender == members.end() || e.offender == e.reporter) return;
  const std::string why = "expelled: instance " + std::to_string(e.reporter) + " reports " + e.reason;
  self->state.expelled[offender->second.rmanager.address()] = why;
  drop_member(self, offender, why);
}

}  // namespace

gmanager_actor::behavior_type gmanager_behavior(self_ptr self, gmanager_config config) {
  self->state.config = std::move(config);
  self->state.next_move = ((self->state.config.epoch / 1000000) & 0xFFFF) << 24 | 1;
  self->set_down_handler([=](const caf::down_msg& down) {
    auto& members = self->state.members;
    for (auto it = members.begin(); it != members.end(); ++it)
      if (it->second.rmanager.address() == down.source) return drop_member(self, it, self->system().render(down.reason));
  });
  self->send(self, policy_tick_atom::value);
  return {
      [=](const join_cluster& j) { return on_join(self, j); },
      [=](moves_atom, request_id req) { return reports_of(self->state, req); },
      [=](heartbeat& hb) { return on_heartbeat(self, hb); },
      [=](policy_tick_atom) {
        drop_silent(self);
        run_policy(self);
      },
      [=](const move_report& r) {  // a refused move is ordered again later
        self->state.ordered.erase(r.id);
        keep_report(self->state, r);
        ++(r.ok ? self->state.moves_done : self->state.moves_refused);
        ++self->state.version;
        if (self->state.config.on_move) self->state.config.on_move(r);
      },
      [=](const drain_instance& d) {
        auto it = self->state.members.find(d.inst_id);
        if (it == self->state.members.end()) return;
        if (!it->second.draining) tell(self, {membership_event::kind::draining, d.inst_id, {}, {}, {}});
        it->second.draining = true;
        self->send(it->second.rmanager, d);
        ++self->state.version;
      },
      [=](const expel_member& e) { expel(self, e); },
      [=](const leave_cluster& l) {
        forget_rooms_of(self->state, l.inst_id);
        self->state.prefixes.drop(l.inst_id);
        if (auto it = self->state.members.find(l.inst_id); it != self->state.members.end())
          keep_departed(self->state, l.inst_id, it->second, "left", "it left the cluster");
        if (self->state.members.erase(l.inst_id)) {
          ++self->state.version;
          tell(self, {membership_event::kind::left, l.inst_id, {}, {}, {}});
        }
      },
      [=](const reserve_room& r) { return reserve(self, r); },
      [=](const release_room& r) {
        if (self->state.rooms.erase({r.owner, r.req_id})) ++self->state.version;
      },
      [=](view_atom) { return view_of(self); },
      [=](const prefix_lookup& l) { return holders_of(self->state, l); },
      [=](status_atom) { return status_of(self); },
  };
}

const char* to_string(membership_event::kind k) {
  switch (k) {
    case membership_event::kind::joined: return "joined";
    case membership_event::kind::draining: return "draining";
    case membership_event::kind::left: return "left";
    case membership_event::kind::down: return "down";
  }
  return "?";
}

gmanager_actor spawn_gmanager(caf::actor_system& sys, gmanager_config config) {
  return sys.spawn(gmanager_behavior, std::move(config));
}

uint64_t gmanager_config::default_epoch() {
  return uint64_t(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

}  // namespace illm::actors
