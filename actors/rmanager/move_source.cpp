// Moves out of this pool, at the source: the gManager's orders (move_kvcache) and this instance's own loans
// (need_blocks). The instance picks the blocks, the destination reserves room (try_move_kvcache), the blocks
// are put into it over the data plane and flushed, the destination commits, and the instance switches its
// table (blocks_moved). A move that fails at any point leaves the request on its old blocks.
#include <fmt/format.h>

#include "actors/rmanager/state.hpp"

namespace illm::actors::rmanager_impl {

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
  if (it->second.replica) return finish_replica(self, id, ok, std::move(reason));
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
      m->move_bytes.with({instance[0], move.path})
          .add(double(report.blocks) * double(st.config.pool->layout().block_bytes()));
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

namespace {

/// A move (not a replica) is in the destination's pool, committed there: its copy's time into kv_move_copy_seconds.
void note_copied(const rmanager_state& st, const outgoing_move& move) {
  auto* m = st.config.metrics.get();
  if (!m || move.replica) return;
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - move.copy_started;
  m->move_copy_seconds.with({std::to_string(st.config.id), move.path}).observe(took.count());
}

/// The copy is visible at the destination: commit, then switch the owner's table.
void commit(self_ptr self, move_id id) {
  auto& move = self->state.outgoing.at(id);
  const instance_id source = move.replica ? move.owner : self->state.config.id;
  self->request(move.dst_rmanager, self->state.config.answer_timeout,
                commit_move{id, move.picked.req_id, source, move.picked.logical, move.checksummed, move.checksum,
                            move.in_place})
      .then(
          [=](const commit_result& r) {
            auto it = self->state.outgoing.find(id);
            if (it == self->state.outgoing.end()) return;
            if (!r.ok) return finish_move(self, id, false, "commit refused: " + r.reason);
            outgoing_move& m = it->second;
            note_copied(self->state, m);
            if (m.replica && !m.cancelled) return finish_replica(self, id, true, {});
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

/// The destination's pool and GPU when it is a device pool of this process (a move copies into it directly).
std::optional<gpu::local_device_pools::entry> pool_in_this_process(const rmanager_state& st, instance_id dst) {
  if (!st.config.local_pools || !st.config.move_device || st.config.move_device->host_memory()) return std::nullopt;
  return st.config.local_pools->find(dst);
}

/// Copies the picked blocks device to device into the reserved blocks of `dst` (on this GPU, or peer to peer on
/// another of this process), then commits.
void copy_in_place(self_ptr self, move_id id, const gpu::local_device_pools::entry& dst) {
  auto& st = self->state;
  outgoing_move& move = st.outgoing.at(id);
  const std::vector<uint32_t>& src = move.picked.physical;
  if (st.config.verify_moves) {
    auto sum = st.config.pool->checksum(src, st.config.move_device.get());
    if (!sum.is_ok()) return finish_move(self, id, false, "checksum: " + sum.error().message());
    move.checksummed = true;
    move.checksum = sum.value();
  }
  gpu::backend& device = *st.config.move_device;
  gpu::status s = device.copy_blocks_to_gpu(dst.device, dst.pool->base(), move.reservation.blocks.data(),
                                            st.config.pool->base(), src.data(), int(src.size()),
                                            dst.pool->layout().block_bytes());
  if (s.is_ok()) s = device.synchronize();
  if (!s.is_ok()) return finish_move(self, id, false, "device copy: " + s.message());
  move.in_place = true;
  move.copies_left = 0;
  if (crashes_at(self, faults::crash_point::mid_move)) return;
  commit(self, id);
}

/// Puts blocks [first, first + n) of the move's picked blocks into their reserved blocks (or landing slots),
/// reading them from `chunk` (a staged copy, kept by every put until it completes) or from the pool's memory.
void put_blocks(self_ptr self, move_id id, size_t first, size_t n, std::shared_ptr<const gpu::outgoing_blocks> chunk) {
  auto& st = self->state;
  const outgoing_move& move = st.outgoing.at(id);
  const move_reservation& r = move.reservation;
  const transport::remote_region region{r.region_address, r.region_bytes, r.region_key};
  const std::vector<uint32_t>& slots = r.landing.empty() ? r.blocks : r.landing;
  rmanager_actor me{self};
  for (size_t i = first; i < first + n; ++i) {
    const uint64_t remote = r.region_address + slots[i] * r.block_bytes;
    const void* local = chunk ? chunk->data(i - first) : st.config.pool->block_data(move.picked.physical[i]);
    st.config.plane->put(move.dst, local, r.block_bytes, region, remote,
                         [me, id, chunk](transport::status s) mutable {
                           chunk.reset();  // the buffer is free before the rManager hears of it
                           caf::anon_send(me, transfer_done{id, s.is_ok(), s.message});
                         });
  }
}

/// Reads the move's next chunks into free staging buffers and puts them, while buffers are free; the move waits
/// for a buffer otherwise (resume_staged_moves). A chunk downloads while the one before is on the network.
void stage_chunks(self_ptr self, move_id id) {
  auto& st = self->state;
  gpu::outgoing_staging& staging = *st.config.staging;
  for (;;) {
    auto it = st.outgoing.find(id);
    if (it == st.outgoing.end()) return;
    outgoing_move& move = it->second;
    const std::span<const uint32_t> picked = move.picked.physical;
    if (move.staged == picked.size()) return;
    const size_t n = std::min<size_t>(staging.chunk_blocks(), picked.size() - move.staged);
    auto read = staging.read(*st.config.pool, picked.subspan(move.staged, n));
    if (!read.is_ok()) return finish_move(self, id, false, "reading the blocks: " + read.error().message());
    if (!read.value()) {
      st.waiting_for_staging.push_back(id);
      return;
    }
    if (st.config.verify_moves) move.checksum = read.value()->checksum(move.checksum);
    const size_t first = move.staged;
    move.staged += uint32_t(n);
    put_blocks(self, id, first, n, std::move(read).value());
  }
}

/// Puts every picked block into the reserved blocks (or their landing slots), then flushes.
void copy_blocks(self_ptr self, move_id id) {
  auto& st = self->state;
  outgoing_move& move = st.outgoing.at(id);
  move.copy_started = std::chrono::steady_clock::now();
  if (const auto dst = pool_in_this_process(st, move.dst);
      dst && dst->pool->layout().block_bytes() == move.reservation.block_bytes) {
    move.path = "device";
    return copy_in_place(self, id, *dst);
  }
  move.path = st.config.staging ? "staged" : "host";
  move.copies_left = uint32_t(move.picked.physical.size());
  // Full blocks do not change while they move (only their owner writes them, and only until full). A device
  // pool's are staged through host memory chunk by chunk; the checksum chains over the chunks as they are read.
  if (st.config.staging) {
    move.checksummed = st.config.verify_moves;
    move.checksum = gpu::checksum_seed;
    return stage_chunks(self, id);
  }
  if (st.config.verify_moves) {
    auto sum = st.config.pool->checksum(move.picked.physical);
    if (!sum.is_ok()) return finish_move(self, id, false, "checksum: " + sum.error().message());
    move.checksummed = true;
    move.checksum = sum.value();
  }
  put_blocks(self, id, 0, move.picked.physical.size(), nullptr);
}

/// A staging buffer may have come free: the moves waiting for one go on, oldest first.
void resume_staged_moves(self_ptr self) {
  auto& st = self->state;
  while (!st.waiting_for_staging.empty() && st.config.staging->free_buffers() > 0) {
    const move_id next = st.waiting_for_staging.front();
    st.waiting_for_staging.pop_front();
    stage_chunks(self, next);
  }
}

}  // namespace

/// A put or the flush of a move completed.
void on_transfer(self_ptr self, const transfer_done& done) {
  auto& st = self->state;
  if (st.config.staging) resume_staged_moves(self);
  auto it = st.outgoing.find(done.id);
  if (it == st.outgoing.end()) return;  // the move already ended
  if (!done.ok) return finish_move(self, done.id, false, "copy failed: " + done.error);
  outgoing_move& move = it->second;
  if (move.copies_left == 0) {  // this was the flush
    if (crashes_at(self, faults::crash_point::mid_move)) return;
    return commit(self, done.id);
  }
  if (--move.copies_left > 0) return;
  rmanager_actor me{self};
  const move_id id = done.id;
  st.config.plane->flush(move.dst, [me, id](transport::status s) {
    caf::anon_send(me, transfer_done{id, s.is_ok(), s.message});
  });
}

/// The instance chose the blocks: reserve room at the destination.
void reserve(self_ptr self, move_id id, block_pick pick) {
  auto& st = self->state;
  auto it = st.outgoing.find(id);
  if (it == st.outgoing.end()) return;
  it->second.picked = std::move(pick);
  if (it->second.picked.logical.empty()) return finish_move(self, id, false, "no full local block to move");
  const outgoing_move& move = it->second;
  self->request(move.dst_rmanager, st.config.answer_timeout,
                try_move_kvcache{id, move.picked.req_id, uint32_t(move.picked.logical.size()),
                                 move.replica ? move.owner : st.config.id, move.replica, st.config.kv})
      .then(
          [=](move_reservation& r) {
            auto jt = self->state.outgoing.find(id);
            if (jt == self->state.outgoing.end()) return;
            if (!r.granted) return finish_move(self, id, false, "refused by instance " + std::to_string(r.dst_inst) +
                                                                    ": " + r.reason);
            if (r.blocks.size() != jt->second.picked.logical.size() ||
                (!r.landing.empty() && r.landing.size() != r.blocks.size()) ||
                r.block_bytes != self->state.config.pool->layout().block_bytes() || !(r.kv == self->state.config.kv)) {
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

namespace {

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

}  // namespace

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
  auto& st = self->state;
  if (!st.orders_seen.insert(m.id).second) return;  // the same order again (a duplicate or a late copy)
  st.orders_seen_in_turn.push_back(m.id);
  if (st.orders_seen_in_turn.size() > 4096) {
    st.orders_seen.erase(st.orders_seen_in_turn.front());
    st.orders_seen_in_turn.pop_front();
  }
  const auto plan = room_plan(self->state, m.req_id);
  if (!plan) return start_move(self, m.id, m.req_id, m.num_blocks, m.dst_inst, false);
  start_move(self, m.id, m.req_id, std::min(m.num_blocks, plan->max_blocks), plan->dst, false);
}

}  // namespace illm::actors::rmanager_impl
