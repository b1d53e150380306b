// Moves into this pool, at the destination: reservations granted first come first served against the blocks
// free at that moment (try_move_kvcache), as leases that expire when the source never commits; commits
// checked against the source's checksum (commit_move); blocks given back (abort_move) or released when their
// owner's request ended (release_blocks); a room's chunk computed here into its reservation.
#include <optional>

#include <fmt/format.h>

#include "actors/rmanager/state.hpp"

namespace illm::actors::rmanager_impl {

namespace {

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
  if (ask.replica) {  // only from blocks nobody else would take: the free list, not spoken for
    const uint32_t room = replica_room(st);
    if (ask.num_blocks <= room)
      if (auto blocks = st.config.pool->allocate_many({ask.req_id, ask.src_inst}, ask.num_blocks); blocks.is_ok())
        return {std::move(blocks).value(), 0};
    reason = fmt::format("{} blocks asked for a replica, {} free for replicas", ask.num_blocks, room);
    return {};
  }
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

/// The landing slots of `move` go back (it committed, ended, or is computed here instead).
void release_landing(rmanager_state& st, incoming_move& move) {
  if (st.config.landing) st.config.landing->give_back(move.landing);
  move.landing.clear();
}

/// Slots for `n` blocks to land in, when the pool is in device memory: none (and `reason`) when too few are free.
std::optional<std::vector<uint32_t>> landing_for(rmanager_state& st, uint32_t n, std::string& reason) {
  if (!st.config.landing) return std::vector<uint32_t>{};
  std::vector<uint32_t> slots = st.config.landing->take(n);
  if (slots.size() == n) return slots;
  reason = fmt::format("{} blocks asked, {} of {} landing slots free", n, st.config.landing->free_slots(),
                       st.config.landing->total_slots());
  return std::nullopt;
}

/// Uploads a committed move's landed bytes into its blocks of the pool (a device pool's).
gpu::status land(rmanager_state& st, incoming_move& move) {
  if (!st.config.landing) return gpu::status::ok();
  const gpu::status s = st.config.landing->land(*st.config.move_device, *st.config.pool, move.landing, move.blocks);
  release_landing(st, move);
  return s;
}

/// A move that did not happen: its blocks go back to the pool, and those promised to its room to the room
/// (unless the request has ended: its promise is gone).
void give_back(self_ptr self, incoming_move& move, incoming_move::state why) {
  release_landing(self->state, move);
  if (move.replica && move.stage == incoming_move::state::committed) {
    drop_replica(self, move);
    move.stage = why;
    return;
  }
  if (move.stage == incoming_move::state::committed) self->state.config.hosted->remove_blocks(move.src, move.req, move.blocks);
  self->state.config.promises->restore(move.src, move.req, move.promised);
  for (uint32_t b : move.blocks) (void)self->state.config.pool->release(b);
  move.stage = why;
}

/// A chunk computed into reservation `id` is no longer wanted: its blocks go back once the instance has
/// stopped writing them (return_reservation).
void stop_chunk(self_ptr self, move_id id, incoming_move& move) {
  if (move.abort_pending) return;
  move.abort_pending = true;
  if (self->state.instance) self->send(self->state.instance, cancel_chunk{id});
}

}  // namespace

move_reservation grant(self_ptr self, const try_move_kvcache& ask) {
  auto& st = self->state;
  move_reservation r;
  r.id = ask.id;
  r.dst_inst = st.config.id;
  if (auto it = st.incoming.find(ask.id); it != st.incoming.end()) {  // a duplicate: the same answer
    r.granted = it->second.stage == incoming_move::state::reserved || it->second.stage == incoming_move::state::committed;
    r.blocks = it->second.blocks;
    if (!r.granted) r.reason = "this move was already given back or expired";
  } else if (std::string why = st.config.kv.mismatch(ask.kv); !why.empty()) {
    r.reason = "the source's pool holds " + why;
  } else if (st.draining) {
    r.reason = "draining";
  } else if (ask.num_blocks == 0) {
    r.reason = "no block asked";
  } else if (auto slots = landing_for(st, ask.num_blocks, r.reason); !slots) {
    // refused: no room to land in
  } else if (reserved_blocks got = reserve_blocks(st, ask, r.reason); got.blocks.empty()) {
    if (st.config.landing) st.config.landing->give_back(*slots);
  } else {
    r.granted = true;
    r.blocks = got.blocks;
    r.landing = *slots;
    incoming_move& move = st.incoming[ask.id] = {ask.req_id, ask.src_inst, std::move(got.blocks), std::move(*slots),
                                                 incoming_move::state::reserved, got.promised,
                                                 self->clock().now() + st.config.lease};
    move.replica = ask.replica;
    self->delayed_send(self, st.config.lease, lease_check_atom::value, ask.id);
  }
  r.free_blocks = st.spare_blocks();
  r.kv = st.config.kv;
  if (r.granted) {
    r.region_address = st.config.region.address;
    r.region_bytes = st.config.region.bytes;
    r.region_key = st.config.region.packed_key;
    r.block_bytes = st.config.pool->layout().block_bytes();
    r.lease_ms = st.config.lease.count();
  }
  return r;
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
  if (c.in_place) release_landing(st, move);  // the source's device copy wrote the blocks: nothing landed
  else if (gpu::status s = land(st, move); !s.is_ok()) return {c.id, false, "landing: " + s.message()};
  auto arrived = c.checksummed ? st.config.pool->checksum(move.blocks, st.config.move_device.get())
                               : gpu::result<uint64_t>(c.checksum);
  if (!arrived.is_ok()) return {c.id, false, "checksum: " + arrived.error().message()};
  if (arrived.value() != c.checksum)
    return {c.id, false, fmt::format("the blocks arrived with checksum {:016x}, sent with {:016x}", arrived.value(),
                                     c.checksum)};
  move.stage = incoming_move::state::committed;
  st.config.pool->mark_written(move.blocks, uint32_t(st.config.pool->layout().n_layers));  // all of them arrived
  if (move.replica) {
    if (!cache_copied_run(self, c.id, move)) keep_replica(self, c.id, move, c.logical);
    return {c.id, true, {}};
  }
  st.config.hosted->add(move.src, move.req, c.logical, move.blocks);
  if (auto* m = st.config.metrics.get()) m->blocks_lent.with({std::to_string(st.config.id)}).add(double(move.blocks.size()));
  return {c.id, true, {}};
}

void on_abort_move(self_ptr self, const abort_move& a) {
  self->state.prefix_copies.erase(a.id);
  auto it = self->state.incoming.find(a.id);
  if (it == self->state.incoming.end()) return;
  if (it->second.computing) return stop_chunk(self, a.id, it->second);
  if (it->second.stage == incoming_move::state::reserved || it->second.stage == incoming_move::state::committed)
    give_back(self, it->second, incoming_move::state::given_back);
}

void on_lease_check(self_ptr self, move_id id) {
  auto it = self->state.incoming.find(id);
  if (it != self->state.incoming.end() && it->second.stage == incoming_move::state::reserved &&
      !it->second.computing && self->clock().now() >= it->second.lease_end) {
    give_back(self, it->second, incoming_move::state::expired);
    self->state.prefix_copies.erase(id);
  }
}

/// The instance computes a chunk into reservation `t.id`: the blocks, if it is that request's and still reserved.
std::vector<uint32_t> take_for_chunk(self_ptr self, const take_reservation& t) {
  auto it = self->state.incoming.find(t.id);
  if (it == self->state.incoming.end()) return {};
  incoming_move& move = it->second;
  if (move.stage != incoming_move::state::reserved || move.computing || move.req != t.req_id || move.src != t.owner)
    return {};
  move.computing = true;
  release_landing(self->state, move);  // computed here: nothing lands
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

namespace {

/// The owner's request ended: this pool's cache takes the request's full blocks that the owner keyed and that it
/// hosts at those places (the owner's table and this pool agree), each with the request as its reader until
/// release_hosted lets go of it; a block whose key the cache holds already stays the request's (and is freed).
void keep_in_cache(rmanager_state& st, const release_blocks& r) {
  if (!st.config.prefix_cache) return;
  const std::map<uint32_t, uint32_t> hosted = st.config.hosted->logical_map(r.owner, r.req_id);
  for (const gpu::keyed_block& b : r.kept) {
    auto at = hosted.find(b.index);
    if (b.pool == st.config.id && at != hosted.end() && at->second == b.block && gpu::well_keyed(b))
      (void)st.config.prefix_cache->offer(b.key, b.parent, b.tokens, b.block);
  }
}

}  // namespace

void free_block(rmanager_state& st, uint32_t b) {
  if (!st.config.prefix_cache || !st.config.prefix_cache->release(b)) (void)st.config.pool->release(b);
}

void release_hosted(self_ptr self, const release_blocks& r) {
  auto& st = self->state;
  st.config.promises->forget(r.owner, r.req_id);
  if (!r.kept.empty()) keep_in_cache(st, r);
  for (uint32_t b : st.config.hosted->remove_request(r.owner, r.req_id))  // empty for a duplicate
    free_block(st, b);
  for (auto& [id, move] : st.incoming) {
    if (move.req != r.req_id || move.src != r.owner) continue;
    if (move.replica && move.stage == incoming_move::state::committed) give_back(self, move, incoming_move::state::given_back);
    if (move.stage == incoming_move::state::committed) move.stage = incoming_move::state::given_back;
    if (move.computing) stop_chunk(self, id, move);
  }
}

void forget_finished_moves(self_ptr self) {
  auto& st = self->state;
  const auto before = self->clock().now() - finished_move_memory;
  std::erase_if(st.incoming, [&](const auto& entry) {
    const incoming_move& move = entry.second;
    const bool finished = move.stage == incoming_move::state::given_back || move.stage == incoming_move::state::expired;
    return finished && !move.computing && move.lease_end < before;
  });
}

}  // namespace illm::actors::rmanager_impl
