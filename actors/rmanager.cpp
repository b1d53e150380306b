#include "actors/rmanager.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include <cstdio>

#include <fmt/format.h>

namespace illm::actors {

namespace {

/// A move this instance executes as the source.
struct outgoing_move {
  request_id req = 0;
  instance_id dst = 0;
  caf::actor dst_rmanager;
  uint32_t asked = 0;
  bool self_initiated = false;
  bool cancelled = false;  // the request ended meanwhile: give everything back
  block_pick picked;
  move_reservation reservation;
  uint32_t copies_left = 0;
  bool checksummed = false;
  uint64_t checksum = 0;  // of the picked blocks as they were put
};

/// A reservation this instance granted as the destination.
struct incoming_move {
  enum class state { reserved, committed, given_back, expired };
  request_id req = 0;
  instance_id src = 0;
  std::vector<uint32_t> blocks;
  state stage = state::reserved;
  uint32_t promised = 0;  // of them, blocks that were promised to the request's room
  caf::actor_clock::time_point lease_end;  // a reservation not committed by then expires
  bool computing = false;      // a room's chunk is being computed into it here: it neither expires nor goes back
  bool abort_pending = false;  // ... and goes back once the chunk has stopped
};

/// A chunk of one of this instance's requests that a holder computes (room prefill), until it is committed.
struct outgoing_chunk {
  request_id req = 0;
  instance_id dst = 0;
  caf::actor dst_rmanager;
  uint32_t blocks = 0;
};


}  // namespace

struct rmanager_state {
  rmanager_config config;
  caf::actor instance;
  cluster_view view;
  uint64_t heartbeat_seq = 0;
  placement_update placement;
  std::map<move_id, outgoing_move> outgoing;
  std::map<move_id, incoming_move> incoming;
  std::map<move_id, outgoing_chunk> chunks;  // reserved for this instance's requests' chunks, not yet committed
  std::map<request_id, std::map<instance_id, uint32_t>> lent;  // this instance's requests' blocks elsewhere
  std::map<request_id, std::map<instance_id, uint32_t>> rooms;  // blocks others keep for our long requests
  std::set<std::pair<request_id, instance_id>> room_refused;  // our rooms' holders that refused a move, until the next view
  std::map<instance_id, std::vector<uint8_t>> connected;  // data-plane peers connected, by their address
  std::map<instance_id, std::vector<uint8_t>> failed;     // peers whose endpoint failed, at that address
  bool loan_in_flight = false;
  bool draining = false;
  uint64_t next_move = 1;
  static inline const char* name = "rmanager";

  /// Free blocks not spoken for by this instance's running requests (some may be promised to rooms).
  uint32_t unpromised_blocks() const {
    const uint32_t running = std::max(placement.promised_blocks, config.promises->running());
    return config.pool->free_blocks() - std::min(config.pool->free_blocks(), running);
  }
  /// Free blocks not spoken for by this instance's running requests nor promised to rooms nor needed by the
  /// request first in its queue: what others may have. While this instance holds blocks back for a long
  /// request waiting for its room, that room comes before its queue.
  uint32_t spare_blocks() const {
    const instance_view* me = view.find(config.id);
    const uint32_t queued = me && me->held_for_room > 0 ? 0 : config.promises->queued();
    return unroomed_blocks() - std::min(unroomed_blocks(), queued);
  }
  /// Free blocks not spoken for by this instance's running requests nor promised to rooms nor kept for the
  /// queued request whose room is granted: what a room the gManager granted may have (its grant came while
  /// this instance held blocks back for it). Moves into rooms promised before may take kept blocks.
  uint32_t unroomed_blocks() const {
    const uint64_t spoken = uint64_t(config.promises->rooms_total()) + config.promises->kept();
    return unpromised_blocks() - uint32_t(std::min<uint64_t>(unpromised_blocks(), spoken));
  }
  /// The room promises are covered again once the unpromised blocks hold them all.
  void check_promises() {
    if (config.promises->overdrawn() && unpromised_blocks() >= config.promises->rooms_total())
      config.promises->set_overdrawn(false);
  }

  instance_stats stats() const {
    instance_stats s;
    s.total_blocks = config.pool->total_blocks();
    s.free_blocks = spare_blocks();
    s.hosted_blocks = config.hosted->count();
    for (const auto& [req, holders] : lent)
      for (const auto& [inst, n] : holders) s.borrowed_blocks += n;
    s.batch_size = placement.batch_size;
    s.waiting = placement.waiting;
    s.waiting_blocks = placement.waiting_blocks;
    s.draining = draining;
    return s;
  }
};

namespace {

using self_ptr = caf::stateful_actor<rmanager_state>*;

void plane_log(const rmanager_state& st, const std::string& line) {
  if (st.config.log) return st.config.log(line);
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
}

/// Whether the data plane reaches `peer` (always, for an in-process plane).
bool reachable(const rmanager_state& st, instance_id peer) {
  return !st.config.connect_peer || st.connected.count(peer) > 0;
}

/// Connects the data plane to every peer of the view that has an address and is not connected at it yet
/// (a peer that failed is connected again only at a new address: a restarted process).
void connect_peers(rmanager_state& st) {
  if (!st.config.connect_peer) return;
  for (const instance_view& i : st.view.instances) {
    if (i.inst_id == st.config.id || i.plane_address.empty()) continue;
    if (auto c = st.connected.find(i.inst_id); c != st.connected.end() && c->second == i.plane_address) continue;
    if (auto f = st.failed.find(i.inst_id); f != st.failed.end() && f->second == i.plane_address) continue;
    const std::string why = st.config.connect_peer(i.inst_id, i.plane_address);
    if (why.empty()) {
      st.connected[i.inst_id] = i.plane_address;
      st.failed.erase(i.inst_id);
      plane_log(st, fmt::format("rmanager {}: data plane connected to instance {}", st.config.id, i.inst_id));
    } else {
      st.connected.erase(i.inst_id);
      st.failed[i.inst_id] = i.plane_address;
      plane_log(st, fmt::format("rmanager {}: data plane cannot connect to instance {}: {}", st.config.id, i.inst_id, why));
    }
  }
}

void release_hosted(self_ptr self, const release_blocks& r);

/// Owners that were members in the last view and are not in `next` (they left, or died; one only silent
/// for a while stays a member): nobody will attend or release the blocks kept here for their requests, nor
/// fill their rooms, so those go now.
void release_departed(self_ptr self, const cluster_view& next) {
  auto& st = self->state;
  for (instance_id gone : st.view.members) {
    if (gone == st.config.id || next.has_member(gone)) continue;
    std::set<request_id> requests;
    for (uint64_t req : st.config.hosted->requests_of(gone)) requests.insert(req);
    for (uint64_t req : st.config.promises->requests_of(gone)) requests.insert(req);
    for (request_id req : requests) release_hosted(self, release_blocks{req, gone});
    if (!requests.empty())
      plane_log(st, fmt::format("rmanager {}: instance {} is gone: released what was kept here for its {} request(s)",
                                st.config.id, gone, requests.size()));
  }
}

/// A newer view: keep it, release what departed owners kept here, and connect to its new peers.
void adopt_view(self_ptr self, cluster_view v) {
  if (v.epoch < self->state.view.epoch) return;  // a late answer
  release_departed(self, v);
  self->state.view = std::move(v);
  self->state.room_refused.clear();
  connect_peers(self->state);
  if (auto& nodes = self->state.config.nodes) {
    std::map<uint32_t, std::string> where;
    for (const instance_view& i : self->state.view.instances) where[i.inst_id] = i.node;
    nodes->update(std::move(where));
  }
}

// ---- the source side of a move ---------------------------------------------------------------------------

/// `blocks` of request `req` are committed at `holder` (moved or computed there): they count as lent, and
/// as taken from its room there.
void note_placed(rmanager_state& st, request_id req, instance_id holder, uint32_t blocks) {
  st.lent[req][holder] += blocks;
  if (auto room = st.rooms.find(req); room != st.rooms.end())
    if (auto held = room->second.find(holder); held != room->second.end()) held->second -= std::min(held->second, blocks);
}

/// Ends a move: reports it, undoes what it held, and answers a pending loan.
void finish_move(self_ptr self, move_id id, bool ok, std::string reason) {
  auto& st = self->state;
  auto it = st.outgoing.find(id);
  if (it == st.outgoing.end()) return;
  outgoing_move move = std::move(it->second);
  st.outgoing.erase(it);
  if (!ok) {
    if (move.reservation.granted) self->send(move.dst_rmanager, abort_move{id});
    if (!move.picked.logical.empty())
      self->send(st.instance, move_abandoned{id, move.picked.req_id, move.picked.logical});
  }
  const move_report report{id,      move.picked.req_id ? move.picked.req_id : move.req,
                           st.config.id, move.dst, uint32_t(move.picked.logical.size()), ok,
                           move.self_initiated, std::move(reason)};
  if (auto* m = st.config.metrics.get()) {
    const metrics::label_values instance{std::to_string(st.config.id)};
    if (ok)
      m->move_bytes.with(instance).add(double(report.blocks) * double(st.config.pool->layout().block_bytes()));
    else if (report.reason.rfind("refused", 0) == 0)
      m->moves_refused.with(instance).add();
    else
      m->moves_failed.with(instance).add();
  }
  if (st.config.events) st.config.events->record(report);
  if (st.config.gmanager) self->send(st.config.gmanager, report);
  if (!ok && report.reason.rfind("refused", 0) == 0 && st.rooms.count(report.req_id) &&
      st.rooms[report.req_id].count(move.dst))
    st.room_refused.insert({report.req_id, move.dst});  // try its other holders until the next view
  if (move.self_initiated) {
    st.loan_in_flight = false;
    self->send(st.instance, loan_result{ok, report.reason});
  }
}

/// The copy is visible at the destination: commit, then switch the owner's table.
void commit(self_ptr self, move_id id) {
  auto& move = self->state.outgoing.at(id);
  self->request(move.dst_rmanager, self->state.config.answer_timeout,
                commit_move{id, move.picked.req_id, self->state.config.id, move.picked.logical, move.checksummed,
                            move.checksum})
      .then(
          [=](const commit_result& r) {
            auto it = self->state.outgoing.find(id);
            if (it == self->state.outgoing.end()) return;
            if (!r.committed) return finish_move(self, id, false, "commit refused: " + r.reason);
            outgoing_move& m = it->second;
            if (m.cancelled) {
              self->send(m.dst_rmanager, abort_move{id});
              m.reservation.granted = false;  // already given back
              return finish_move(self, id, false, "the request ended during the move");
            }
            self->request(self->state.instance, caf::infinite,
                          blocks_moved{id, m.picked.req_id, m.dst, m.picked.logical, m.reservation.blocks})
                .then([=](bool switched) {
                  auto jt = self->state.outgoing.find(id);
                  if (jt == self->state.outgoing.end()) return;
                  if (!switched) {
                    self->send(jt->second.dst_rmanager, abort_move{id});
                    jt->second.reservation.granted = false;
                    jt->second.picked.logical.clear();  // nothing to unmark: the request is gone
                    return finish_move(self, id, false, "the request ended during the move");
                  }
                  note_placed(self->state, jt->second.picked.req_id, jt->second.dst,
                              uint32_t(jt->second.picked.logical.size()));
                  finish_move(self, id, true, {});
                });
          },
          [=](const caf::error& err) { finish_move(self, id, false, "no commit answer: " + self->system().render(err)); });
}

/// Puts every picked block into the reserved blocks, then flushes.
void copy_blocks(self_ptr self, move_id id) {
  auto& st = self->state;
  outgoing_move& move = st.outgoing.at(id);
  const transport::remote_region region{move.reservation.region_address, move.reservation.region_bytes,
                                        move.reservation.region_key};
  move.copies_left = uint32_t(move.picked.physical.size());
  // Full blocks do not change while they move (only their owner writes them, and only until full).
  if (st.config.verify_moves) {
    auto sum = st.config.pool->checksum(move.picked.physical);
    if (!sum.is_ok()) return finish_move(self, id, false, "checksum: " + sum.error().message());
    move.checksummed = true;
    move.checksum = sum.value();
  }
  caf::actor me = caf::actor_cast<caf::actor>(self);
  for (size_t i = 0; i < move.picked.physical.size(); ++i) {
    const uint64_t remote = move.reservation.region_address + move.reservation.blocks[i] * move.reservation.block_bytes;
    st.config.plane->put(move.dst, st.config.pool->block_data(move.picked.physical[i]), move.reservation.block_bytes,
                         region, remote, [me, id](gpu::status s) {
                           caf::anon_send(me, transfer_done{id, s.is_ok(), s.message()});
                         });
  }
}

/// A put or the flush of a move completed.
void on_transfer(self_ptr self, const transfer_done& done) {
  auto& st = self->state;
  auto it = st.outgoing.find(done.id);
  if (it == st.outgoing.end()) return;  // the move already ended
  if (!done.ok) return finish_move(self, done.id, false, "copy failed: " + done.error);
  outgoing_move& move = it->second;
  if (move.copies_left == 0) return commit(self, done.id);  // this was the flush
  if (--move.copies_left > 0) return;
  caf::actor me = caf::actor_cast<caf::actor>(self);
  const move_id id = done.id;
  st.config.plane->flush(move.dst, [me, id](gpu::status s) {
    caf::anon_send(me, transfer_done{id, s.is_ok(), s.message()});
  });
}

/// The instance chose the blocks: reserve room at the destination.
void reserve(self_ptr self, move_id id, block_pick pick) {
  auto& st = self->state;
  auto it = st.outgoing.find(id);
  if (it == st.outgoing.end()) return;
  it->second.picked = std::move(pick);
  if (it->second.picked.logical.empty()) return finish_move(self, id, false, "no full local block to move");
  self->request(it->second.dst_rmanager, st.config.answer_timeout,
                try_move_kvcache{id, it->second.picked.req_id, uint32_t(it->second.picked.logical.size()), st.config.id})
      .then(
          [=](move_reservation& r) {
            auto jt = self->state.outgoing.find(id);
            if (jt == self->state.outgoing.end()) return;
            if (!r.granted) return finish_move(self, id, false, "refused by instance " + std::to_string(r.dst_inst) +
                                                                    ": " + r.reason);
            if (r.blocks.size() != jt->second.picked.logical.size() ||
                r.block_bytes != self->state.config.pool->layout().block_bytes()) {
              jt->second.reservation = std::move(r);
              return finish_move(self, id, false, "reservation does not match the request");
            }
            jt->second.reservation = std::move(r);
            if (jt->second.cancelled) return finish_move(self, id, false, "the request ended during the move");
            copy_blocks(self, id);
          },
          [=](const caf::error& err) {
            finish_move(self, id, false, "no answer to try_move: " + self->system().render(err));
          });
}

/// Starts a move of up to num_blocks of req's full local blocks to dst.
void start_move(self_ptr self, move_id id, request_id req, uint32_t num_blocks, instance_id dst, bool loan) {
  auto& st = self->state;
  if (st.outgoing.count(id)) return;  // a duplicate order
  outgoing_move move;
  move.req = req;
  move.dst = dst;
  move.asked = num_blocks;
  move.self_initiated = loan;
  const instance_view* target = st.view.find(dst);
  st.outgoing.emplace(id, std::move(move));
  if (!target || !target->rmanager || dst == st.config.id || !st.instance)
    return finish_move(self, id, false, fmt::format("instance {} is not a destination", dst));
  if (!reachable(st, dst))
    return finish_move(self, id, false, fmt::format("instance {} is not reachable on the data plane", dst));
  st.outgoing[id].dst_rmanager = target->rmanager;
  if (auto* m = st.config.metrics.get()) m->moves_started.with({std::to_string(st.config.id)}).add();
  // The gManager's orders and loans into a room move that request's blocks; other loans any request's.
  const bool only_this = !loan || st.rooms.count(req) > 0;
  self->request(st.instance, caf::infinite, pick_blocks{id, req, num_blocks, only_this})
      .then([=](block_pick& pick) { reserve(self, id, std::move(pick)); },
            [=](const caf::error& err) { finish_move(self, id, false, "instance did not pick blocks"); });
}

/// Blocks of req on instance `inst`, by the latest placement (the last one may not be full yet).
uint32_t blocks_on(const rmanager_state& st, request_id req, instance_id inst) {
  uint32_t n = 0;
  for (const auto& e : st.placement.placement)
    if (e.req_id == req && e.inst_id == inst) n += e.num_blocks;
  return n;
}

/// A loan: whose blocks move, where, and how many at most.
struct loan_plan {
  request_id req = 0;
  instance_id dst = 0;
  uint32_t max_blocks = 0;
};

/// The holder of req's room that holds the fewest of its blocks yet (then: the most still kept), if any is
/// alive: every step waits for the holder with the most, so the room fills evenly.
std::optional<loan_plan> room_plan(const rmanager_state& st, request_id req) {
  auto room = st.rooms.find(req);
  if (room == st.rooms.end()) return std::nullopt;
  std::optional<loan_plan> best;
  uint32_t best_holds = 0;
  for (const auto& [holder, kept] : room->second) {
    if (kept == 0 || !st.view.find(holder) || st.room_refused.count({req, holder})) continue;
    const uint32_t holds = blocks_on(st, req, holder);
    if (!best || holds < best_holds || (holds == best_holds && kept > best->max_blocks)) {
      best = {req, holder, kept};
      best_holds = holds;
    }
  }
  return best;
}

/// Where a loan for a short request goes. Requests with a room lend into it: the short one if it has
/// full blocks here, else the one with the most blocks here (its blocks leave, the short one takes their
/// place). Otherwise any request's blocks go to the instance with the most spare blocks in the latest view.
std::optional<loan_plan> plan_loan(const rmanager_state& st, request_id short_req) {
  if (blocks_on(st, short_req, st.config.id) > 1)
    if (auto plan = room_plan(st, short_req)) return plan;
  std::optional<loan_plan> best;
  uint32_t best_local = 1;
  for (const auto& [req, holders] : st.rooms)
    if (const uint32_t local = blocks_on(st, req, st.config.id); local > best_local)
      if (auto plan = room_plan(st, req)) {
        best = plan;
        best_local = local;
      }
  if (best) return best;
  const instance_view* sparest = nullptr;
  for (const instance_view& i : st.view.instances)
    if (i.inst_id != st.config.id && !i.draining && i.movable_into() > 0 &&
        (!sparest || i.movable_into() > sparest->movable_into()))
      sparest = &i;
  if (!sparest) return std::nullopt;
  return loan_plan{st.rooms.count(short_req) ? 0 : short_req, sparest->inst_id, sparest->movable_into()};
}

/// The instance is short of blocks: lend some of them to a room's holder or the sparest instance.
void start_loan(self_ptr self, const need_blocks& need) {
  auto& st = self->state;
  if (st.loan_in_flight) return;  // the pending loan answers
  const auto plan = plan_loan(st, need.req_id);
  if (!plan) {
    self->send(st.instance, loan_result{false, "no instance has a free block"});
    return;
  }
  st.loan_in_flight = true;
  const move_id id = (uint64_t(st.config.id) + 1) << 40 | st.next_move++;
  start_move(self, id, plan->req, std::min(need.num_blocks, plan->max_blocks), plan->dst, true);
}

/// The gManager's order to move blocks of a request out. A request with a room moves them into it, to its
/// holder with the fewest of them (the room's blocks are kept for it, and every step waits for the holder
/// that attends the most); the others to the creditor the policy chose.
void order_move(self_ptr self, const move_kvcache& m) {
  const auto plan = room_plan(self->state, m.req_id);
  if (!plan) return start_move(self, m.id, m.req_id, m.num_blocks, m.dst_inst, false);
  start_move(self, m.id, m.req_id, std::min(m.num_blocks, plan->max_blocks), plan->dst, false);
}

void release_everywhere(self_ptr self, request_id req);

/// Has every holder of a granted room keep its blocks; the instance hears granted only when all did
/// (else what was kept is released and the room given up).
void keep_room(self_ptr self, room_answer a) {
  struct tally {
    room_answer answer;
    size_t pending = 0;
    bool all_kept = true;
  };
  auto t = std::make_shared<tally>(tally{std::move(a), 0, true});
  t->pending = t->answer.holders.size();
  auto done = [=] {
    auto& st = self->state;
    st.rooms[t->answer.req_id] = {t->answer.holders.begin(), t->answer.holders.end()};
    if (!t->all_kept) {
      release_everywhere(self, t->answer.req_id);
      t->answer = {t->answer.req_id, false, "a holder could not keep the blocks", {}};
    }
    self->send(st.instance, std::move(t->answer));
  };
  for (const auto& [holder, n] : t->answer.holders) {
    const instance_view* v = self->state.view.find(holder);
    if (!v || !v->rmanager) {
      t->all_kept = false;
      if (--t->pending == 0) done();
      continue;
    }
    self->request(v->rmanager, self->state.config.answer_timeout,
                  keep_blocks{self->state.config.id, t->answer.req_id, n})
        .then([=](uint32_t kept) { t->all_kept = t->all_kept && kept == n; if (--t->pending == 0) done(); },
              [=](const caf::error&) { t->all_kept = false; if (--t->pending == 0) done(); });
  }
  if (t->answer.holders.empty()) done();
}

/// Asks the gManager for room elsewhere for a long request; the instance hears the answer.
void ask_room(self_ptr self, const reserve_room& r) {
  auto& st = self->state;
  if (!st.config.gmanager) {
    self->send(st.instance, room_answer{r.req_id, false, "no gManager", {}});
    return;
  }
  self->request(st.config.gmanager, st.config.answer_timeout, r)
      .then(
          [=](room_answer& a) {
            if (a.granted) return keep_room(self, std::move(a));
            self->send(self->state.instance, std::move(a));
          },
          [=](const caf::error& err) {
            self->send(self->state.instance, room_answer{r.req_id, false, "no answer: " + self->system().render(err), {}});
          });
}

// ---- a room's chunks, at the owner ------------------------------------------------------------------------

move_reservation refused_reservation(move_id id, instance_id holder, std::string reason) {
  move_reservation r;
  r.id = id;
  r.dst_inst = holder;
  r.reason = std::move(reason);
  return r;
}

/// Reserves a chunk's blocks at its holder, out of the request's room there (the instance hands the chunk to
/// the holder once it has them).
caf::result<move_reservation> reserve_for_chunk(self_ptr self, const reserve_chunk& c) {
  auto& st = self->state;
  const instance_view* holder = st.view.find(c.holder);
  if (!holder || !holder->rmanager || c.holder == st.config.id || !reachable(st, c.holder))
    return refused_reservation(c.id, c.holder, fmt::format("instance {} is not a holder now", c.holder));
  auto promise = self->make_response_promise<move_reservation>();
  caf::actor dst = holder->rmanager;
  self->request(dst, st.config.answer_timeout, try_move_kvcache{c.id, c.req_id, c.num_blocks, st.config.id})
      .then(
          [=](move_reservation& r) mutable {
            if (r.granted && r.blocks.size() != c.num_blocks) {
              self->send(dst, abort_move{c.id});
              r = refused_reservation(c.id, c.holder, "the reservation does not match the chunk");
            }
            if (r.granted) self->state.chunks[c.id] = {c.req_id, c.holder, dst, c.num_blocks};
            promise.deliver(std::move(r));
          },
          [=](const caf::error& err) mutable {
            promise.deliver(refused_reservation(c.id, c.holder, "no answer: " + self->system().render(err)));
          });
  return promise;
}

/// Reports how a chunk's placement ended, as a move (computed where it lives, nothing copied).
void report_chunk(self_ptr self, move_id id, const outgoing_chunk& c, bool ok, std::string reason) {
  auto& st = self->state;
  const move_report report{id, c.req, st.config.id, c.dst, c.blocks, ok, false, std::move(reason), true};
  if (st.config.events) st.config.events->record(report);
  if (st.config.gmanager) self->send(st.config.gmanager, report);
}

/// Commits a written chunk at its holder: its blocks become hosted blocks of the request there.
caf::result<bool> commit_written_chunk(self_ptr self, const commit_chunk& c) {
  auto& st = self->state;
  auto it = st.chunks.find(c.id);
  if (it == st.chunks.end() || it->second.req != c.req_id || c.logical.size() != it->second.blocks) return false;
  auto promise = self->make_response_promise<bool>();
  self->request(it->second.dst_rmanager, st.config.answer_timeout,
                commit_move{c.id, c.req_id, st.config.id, c.logical, false, 0})
      .then(
          [=](const commit_result& r) mutable {
            auto jt = self->state.chunks.find(c.id);
            if (jt == self->state.chunks.end()) {  // given up meanwhile
              promise.deliver(false);
              return;
            }
            const outgoing_chunk chunk = jt->second;
            self->state.chunks.erase(jt);
            if (r.committed)
              note_placed(self->state, chunk.req, chunk.dst, chunk.blocks);
            else
              self->send(chunk.dst_rmanager, abort_move{c.id});
            report_chunk(self, c.id, chunk, r.committed, r.committed ? "" : "commit refused: " + r.reason);
            promise.deliver(r.committed);
          },
          [=](const caf::error& err) mutable {
            if (auto jt = self->state.chunks.find(c.id); jt != self->state.chunks.end()) {
              self->send(jt->second.dst_rmanager, abort_move{c.id});
              report_chunk(self, c.id, jt->second, false, "no commit answer: " + self->system().render(err));
              self->state.chunks.erase(jt);
            }
            promise.deliver(false);
          });
  return promise;
}

/// Gives a chunk's reservation back at its holder.
void abort_outgoing_chunk(self_ptr self, move_id id) {
  auto it = self->state.chunks.find(id);
  if (it == self->state.chunks.end()) return;
  self->send(it->second.dst_rmanager, abort_move{id});
  self->state.chunks.erase(it);
}

// ---- the destination side ---------------------------------------------------------------------------------

/// A holder's side of a room: promise the blocks, all or none. They stay in the pool until the owner's
/// moves take them.
uint32_t keep(self_ptr self, const keep_blocks& k) {
  auto& st = self->state;
  if (st.draining || k.num_blocks == 0 || k.num_blocks > st.unroomed_blocks()) return 0;
  st.config.promises->promise(k.owner, k.req_id, k.num_blocks);
  return k.num_blocks;
}

/// Blocks reserved for a move, and how many of them were promised to its room.
struct reserved_blocks {
  std::vector<uint32_t> blocks;
  uint32_t promised = 0;
};

/// The blocks for a try_move, all or none: a room's move may have the blocks promised to it and the spare
/// ones (neither spoken for by running requests nor promised to rooms, nor held for a waiting room), other
/// moves only spare ones. A room whose promised blocks this instance's own requests took waits for them to
/// end: the promises are overdrawn until then. None, with `reason` set, when refused.
reserved_blocks reserve_blocks(rmanager_state& st, const try_move_kvcache& ask, std::string& reason) {
  const uint32_t promised = std::min(ask.num_blocks, st.config.promises->of(ask.src_inst, ask.req_id));
  const uint32_t unpromised = st.unpromised_blocks();
  const instance_view* me = st.view.find(st.config.id);
  const uint32_t held = me ? me->held_for_room : 0, not_held = st.spare_blocks();
  const uint32_t spare = not_held - std::min(not_held, held);
  if (ask.num_blocks - promised <= spare && ask.num_blocks <= unpromised) {
    if (auto blocks = st.config.pool->allocate_many({ask.req_id, ask.src_inst}, ask.num_blocks); blocks.is_ok()) {
      st.config.promises->take(ask.src_inst, ask.req_id, promised);
      return {std::move(blocks).value(), promised};
    }
  }
  if (promised > 0 && ask.num_blocks > unpromised) st.config.promises->set_overdrawn(true);
  reason = fmt::format("{} blocks asked, {} free ({} spare, {} promised to its room, {} held for running requests)",
                       ask.num_blocks, st.config.pool->free_blocks(), spare, promised,
                       st.config.pool->free_blocks() - unpromised);
  return {};
}

move_reservation grant(self_ptr self, const try_move_kvcache& ask) {
  auto& st = self->state;
  move_reservation r;
  r.id = ask.id;
  r.dst_inst = st.config.id;
  if (auto it = st.incoming.find(ask.id); it != st.incoming.end()) {  // a duplicate: the same answer
    r.granted = it->second.stage == incoming_move::state::reserved || it->second.stage == incoming_move::state::committed;
    r.blocks = it->second.blocks;
    if (!r.granted) r.reason = "this move was already given back or expired";
  } else if (st.draining) {
    r.reason = "draining";
  } else if (ask.num_blocks == 0) {
    r.reason = "no block asked";
  } else if (reserved_blocks got = reserve_blocks(st, ask, r.reason); !got.blocks.empty()) {
    r.granted = true;
    r.blocks = got.blocks;
    st.incoming[ask.id] = {ask.req_id, ask.src_inst, std::move(got.blocks), incoming_move::state::reserved,
                           got.promised, self->clock().now() + st.config.lease};
    self->delayed_send(self, st.config.lease, lease_check_atom::value, ask.id);
  }
  r.free_blocks = st.spare_blocks();
  if (r.granted) {
    r.region_address = st.config.region.address;
    r.region_bytes = st.config.region.bytes;
    r.region_key = st.config.region.packed_key;
    r.block_bytes = st.config.pool->layout().block_bytes();
    r.lease_ms = st.config.lease.count();
  }
  return r;
}

/// A move that did not happen: its blocks go back to the pool, and those promised to its room to the room
/// (unless the request has ended: its promise is gone).
void give_back(self_ptr self, incoming_move& move, incoming_move::state why) {
  if (move.stage == incoming_move::state::committed) self->state.config.hosted->remove_blocks(move.src, move.req, move.blocks);
  self->state.config.promises->restore(move.src, move.req, move.promised);
  for (uint32_t b : move.blocks) (void)self->state.config.pool->release(b);
  move.stage = why;
}

commit_result accept_commit(self_ptr self, const commit_move& c) {
  auto& st = self->state;
  auto it = st.incoming.find(c.id);
  if (it == st.incoming.end()) return {c.id, false, "unknown move"};
  incoming_move& move = it->second;
  switch (move.stage) {
    case incoming_move::state::committed: return {c.id, true, {}};  // a duplicate
    case incoming_move::state::expired: return {c.id, false, "the lease expired"};
    case incoming_move::state::given_back: return {c.id, false, "the move was aborted"};
    case incoming_move::state::reserved: break;
  }
  if (c.logical.size() != move.blocks.size() || c.src_inst != move.src) return {c.id, false, "commit does not match"};
  // What arrived must be what was sent; else the source keeps its blocks (and aborts: they are given back).
  auto arrived = c.checksummed ? st.config.pool->checksum(move.blocks) : gpu::result<uint64_t>(c.checksum);
  if (!arrived.is_ok()) return {c.id, false, "checksum: " + arrived.error().message()};
  if (arrived.value() != c.checksum)
    return {c.id, false, fmt::format("the blocks arrived with checksum {:016x}, sent with {:016x}", arrived.value(),
                                     c.checksum)};
  move.stage = incoming_move::state::committed;
  st.config.pool->mark_written(move.blocks, uint32_t(st.config.pool->layout().n_layers));  // all of them arrived
  st.config.hosted->add(move.src, move.req, c.logical, move.blocks);
  if (auto* m = st.config.metrics.get()) m->blocks_lent.with({std::to_string(st.config.id)}).add(double(move.blocks.size()));
  return {c.id, true, {}};
}

/// A chunk computed into reservation `id` is no longer wanted: its blocks go back once the instance has
/// stopped writing them (return_reservation).
void stop_chunk(self_ptr self, move_id id, incoming_move& move) {
  if (move.abort_pending) return;
  move.abort_pending = true;
  if (self->state.instance) self->send(self->state.instance, cancel_chunk{id});
}

/// The instance computes a chunk into reservation `t.id`: the blocks, if it is that request's and still reserved.
std::vector<uint32_t> take_for_chunk(self_ptr self, const take_reservation& t) {
  auto it = self->state.incoming.find(t.id);
  if (it == self->state.incoming.end()) return {};
  incoming_move& move = it->second;
  if (move.stage != incoming_move::state::reserved || move.computing || move.req != t.req_id || move.src != t.owner)
    return {};
  move.computing = true;
  return move.blocks;
}

/// The instance stopped computing the chunk of reservation `id`: it waits for its commit for a lease again, or
/// goes back now if it was aborted or its request ended meanwhile.
void chunk_returned(self_ptr self, move_id id) {
  auto& st = self->state;
  auto it = st.incoming.find(id);
  if (it == st.incoming.end() || !it->second.computing) return;
  incoming_move& move = it->second;
  move.computing = false;
  if (move.abort_pending) return give_back(self, move, incoming_move::state::given_back);
  move.lease_end = self->clock().now() + st.config.lease;
  self->delayed_send(self, st.config.lease, lease_check_atom::value, id);
}

/// Frees every block held for req and forgets its room's promise (owner's request ended).
void release_hosted(self_ptr self, const release_blocks& r) {
  auto& st = self->state;
  st.config.promises->forget(r.owner, r.req_id);
  for (uint32_t b : st.config.hosted->remove_request(r.owner, r.req_id))  // empty for a duplicate
    (void)st.config.pool->release(b);
  for (auto& [id, move] : st.incoming) {
    if (move.req != r.req_id || move.src != r.owner) continue;
    if (move.stage == incoming_move::state::committed) move.stage = incoming_move::state::given_back;
    if (move.computing) stop_chunk(self, id, move);
  }
}

/// This instance's request ended: free its blocks elsewhere and stop its moves.
void release_everywhere(self_ptr self, request_id req) {
  auto& st = self->state;
  std::set<instance_id> holders;
  if (auto it = st.lent.find(req); it != st.lent.end()) {
    for (const auto& [holder, n] : it->second) holders.insert(holder);
    st.lent.erase(it);
  }
  if (auto it = st.rooms.find(req); it != st.rooms.end()) {
    for (const auto& [holder, n] : it->second) holders.insert(holder);
    st.rooms.erase(it);
    if (st.config.gmanager) self->send(st.config.gmanager, release_room{st.config.id, req});
  }
  for (instance_id holder : holders)
    if (const instance_view* v = st.view.find(holder); v && v->rmanager)
      self->send(v->rmanager, release_blocks{req, st.config.id});
  for (auto& [id, move] : st.outgoing)
    if (move.req == req || move.picked.req_id == req) move.cancelled = true;
  std::vector<move_id> chunks;
  for (const auto& [id, chunk] : st.chunks)
    if (chunk.req == req) chunks.push_back(id);
  for (move_id id : chunks) abort_outgoing_chunk(self, id);
}

// ---- heartbeat ------------------------------------------------------------------------------------------------

void send_heartbeat(self_ptr self) {
  auto& st = self->state;
  self->delayed_send(self, st.config.heartbeat_period, heartbeat_tick_atom::value);
  if (!st.config.gmanager) return;
  heartbeat hb{st.config.id, ++st.heartbeat_seq, st.stats(), st.placement.placement};
  if (auto* m = st.config.metrics.get()) {
    const metrics::label_values instance{std::to_string(st.config.id)};
    m->blocks_hosted.with(instance).set(hb.stats.hosted_blocks);
    m->blocks_borrowed.with(instance).set(hb.stats.borrowed_blocks);
  }
  self->request(st.config.gmanager, st.config.answer_timeout, std::move(hb))
      .then(
          [=](cluster_view& v) {
            if (v.epoch < self->state.view.epoch) return;  // a late answer
            adopt_view(self, std::move(v));
            if (self->state.instance) self->send(self->state.instance, self->state.view);
          },
          [=](const caf::error&) {});  // the next period tries again; instances keep serving meanwhile
}

/// Joins the gManager, with the instance actor once it is attached (the gManager takes the second join as
/// an update). A refusal (the id is taken) is logged; the gManager ignores this rManager's heartbeats then.
void join(self_ptr self) {
  auto& st = self->state;
  if (!st.config.gmanager) return;
  self->request(st.config.gmanager, st.config.answer_timeout,
                join_cluster{st.config.id, caf::actor_cast<caf::actor>(self), st.instance, st.stats(),
                             st.config.plane_address, st.config.node})
      .then([=](cluster_view& v) { adopt_view(self, std::move(v)); },
            [=](const caf::error& e) {
              if (e == caf::sec::request_timeout) return;  // heartbeats go on; the gManager may be slow
              plane_log(self->state, fmt::format("rmanager {}: join refused: {}", self->state.config.id,
                                                 self->system().render(e)));
            });
}

}  // namespace

caf::behavior rmanager_behavior(self_ptr self, rmanager_config config) {
  if (!config.promises) config.promises = std::make_shared<pool_promises>();
  self->state.config = std::move(config);
  join(self);
  self->send(self, heartbeat_tick_atom::value);
  return {
      [=](attach_atom, caf::actor instance) {
        self->state.instance = std::move(instance);
        join(self);
      },
      [=](heartbeat_tick_atom) { send_heartbeat(self); },
      [=](const move_kvcache& m) { order_move(self, m); },
      [=](const need_blocks& n) { start_loan(self, n); },
      [=](const keep_blocks& k) { return keep(self, k); },
      [=](reserve_room& r) {
        r.owner = self->state.config.id;
        ask_room(self, r);
      },
      [=](const transfer_done& d) { on_transfer(self, d); },
      [=](const try_move_kvcache& t) { return grant(self, t); },
      [=](const commit_move& c) { return accept_commit(self, c); },
      [=](const abort_move& a) {
        auto it = self->state.incoming.find(a.id);
        if (it == self->state.incoming.end()) return;
        if (it->second.computing) return stop_chunk(self, a.id, it->second);
        if (it->second.stage == incoming_move::state::reserved || it->second.stage == incoming_move::state::committed)
          give_back(self, it->second, incoming_move::state::given_back);
      },
      [=](lease_check_atom, move_id id) {
        auto it = self->state.incoming.find(id);
        if (it != self->state.incoming.end() && it->second.stage == incoming_move::state::reserved &&
            !it->second.computing && self->clock().now() >= it->second.lease_end)
          give_back(self, it->second, incoming_move::state::expired);
      },
      [=](const reserve_chunk& c) { return reserve_for_chunk(self, c); },
      [=](const commit_chunk& c) { return commit_written_chunk(self, c); },
      [=](const abort_chunk& a) { abort_outgoing_chunk(self, a.id); },
      [=](const take_reservation& t) { return take_for_chunk(self, t); },
      [=](const return_reservation& r) { chunk_returned(self, r.id); },
      [=](const release_blocks& r) { release_hosted(self, r); },
      [=](const drain_instance&) { self->state.draining = true; },
      [=](const request_released& r) { release_everywhere(self, r.req_id); },
      [=](placement_update& p) {
        self->state.placement = std::move(p);
        self->state.check_promises();
      },
      [=](cluster_view& v) { adopt_view(self, std::move(v)); },
      [=](const peer_failed& p) {
        auto& st = self->state;
        plane_log(st, fmt::format("rmanager {}: data plane peer {} failed: {}", st.config.id, p.peer, p.reason));
        if (auto c = st.connected.find(p.peer); c != st.connected.end()) {
          st.failed[p.peer] = c->second;
          st.connected.erase(c);
        }
        std::vector<move_id> doomed;
        for (const auto& [id, move] : st.outgoing)
          if (move.dst == p.peer) doomed.push_back(id);
        for (move_id id : doomed) finish_move(self, id, false, "data plane peer failed: " + p.reason);
        for (auto c = st.chunks.begin(); c != st.chunks.end();)  // the instance hears it from its chunk's holder
          c = c->second.dst == p.peer ? st.chunks.erase(c) : std::next(c);
      },
      [=](caf::get_atom) { return self->state.stats(); },
  };
}

caf::actor spawn_rmanager(caf::actor_system& sys, rmanager_config config) {
  return sys.spawn(rmanager_behavior, std::move(config));
}

}  // namespace illm::actors
