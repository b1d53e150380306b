// A long request's room: the owner's rManager asks the gManager for it (reserve_room), has every holder keep
// its blocks (keep_blocks) before the instance hears it may start, and releases it and every block held
// elsewhere when the request ends (request_released -> release_blocks, release_room).
#include "actors/rmanager/state.hpp"

namespace illm::actors::rmanager_impl {

namespace {

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

}  // namespace

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

/// A holder's side of a room: promise the blocks, all or none. They stay in the pool until the owner's
/// moves take them.
uint32_t keep(self_ptr self, const keep_blocks& k) {
  auto& st = self->state;
  if (st.draining || k.num_blocks == 0 || k.num_blocks > st.unroomed_blocks()) return 0;
  st.config.promises->promise(k.owner, k.req_id, k.num_blocks);
  return k.num_blocks;
}

/// This instance's request ended: free its blocks elsewhere and stop its moves.
void release_everywhere(self_ptr self, request_id req, const std::vector<gpu::keyed_block>& kept) {
  auto& st = self->state;
  std::set<instance_id> holders;
  if (auto it = st.lent.find(req); it != st.lent.end()) {
    for (const auto& [holder, n] : it->second) holders.insert(holder);
    st.lent.erase(it);
  }
  if (auto it = st.replica_holders.find(req); it != st.replica_holders.end()) {
    holders.insert(it->second.begin(), it->second.end());
    st.replica_holders.erase(it);
  }
  if (auto it = st.rooms.find(req); it != st.rooms.end()) {
    for (const auto& [holder, n] : it->second) holders.insert(holder);
    st.rooms.erase(it);
    if (st.config.gmanager) self->send(st.config.gmanager, release_room{st.config.id, req});
  }
  for (instance_id holder : holders)  // also a holder the view leaves out for now: it keeps the blocks else
    if (auto known = st.member_rmanagers.find(holder); known != st.member_rmanagers.end()) {
      std::vector<gpu::keyed_block> theirs;
      std::copy_if(kept.begin(), kept.end(), std::back_inserter(theirs),
                   [holder](const gpu::keyed_block& b) { return b.pool == holder; });
      self->send(known->second, release_blocks{req, st.config.id, std::move(theirs)});
    }
  for (auto& [id, move] : st.outgoing)
    if (move.req == req || move.picked.req_id == req) move.cancelled = true;
  std::vector<move_id> chunks;
  for (const auto& [id, chunk] : st.chunks)
    if (chunk.req == req) chunks.push_back(id);
  for (move_id id : chunks) abort_outgoing_chunk(self, id);
}

}  // namespace illm::actors::rmanager_impl
