// Block moves, at the source instance: the rManager asks which blocks to move (pick_blocks -> block_pick);
// once the destination has the copy (blocks_moved) the request's table switches to it and the local blocks are
// freed, between steps; a failed move (move_abandoned) leaves the request on its local blocks.
#include "actors/instance/state.hpp"

namespace illm::actors::instance_impl {

namespace {

/// Switches the moved blocks to their new place and frees the local copies (between steps).
bool switch_blocks(self_ptr self, const blocks_moved& m) {
  auto& st = self->state;
  auto pick_it = st.picks.find(m.id);
  auto req_it = st.requests.find(m.req_id);
  bool ok = pick_it != st.picks.end() && req_it != st.requests.end() && !req_it->second.seq->finished() &&
            m.logical == pick_it->second.logical && m.dst_blocks.size() == m.logical.size();
  gpu::sequence* seq = ok ? req_it->second.seq.get() : nullptr;
  for (size_t k = 0; ok && k < m.logical.size(); ++k)  // the table still holds the copies we moved
    ok = m.logical[k] < seq->table.size() &&
         seq->table[m.logical[k]] == gpu::block_ref{st.config.id, pick_it->second.physical[k]};
  if (ok) {
    for (size_t k = 0; k < m.logical.size(); ++k) seq->table[m.logical[k]] = {m.dst_inst, m.dst_blocks[k]};
    note_promised(st);  // a request with a room may take some of the freed blocks back: they are promised first
    for (uint32_t b : pick_it->second.physical) (void)st.blocks->release({st.config.id, b});
  }
  unmark(self, m.id);
  return ok;
}

/// Full local blocks of `s` that may move now, oldest first, at most `max_blocks`. A chunk's blocks are its
/// owner's; a request whose prompt its room prefills is read there as it is; a cached block other requests read
/// too would stay here for them (a move would free nothing).
std::vector<uint32_t> movable_blocks(const instance_state& st, const gpu::sequence& s, uint32_t max_blocks) {
  std::vector<uint32_t> out;
  if (s.foreign() || st.prefills.count(s.id)) return out;
  for (uint32_t i = 0; i < s.full_blocks() && i < s.table.size() && out.size() < max_blocks; ++i)
    if (s.table[i].pool == st.config.id && !st.moving.count({s.id, i}) &&
        !(st.config.prefix_cache && st.config.prefix_cache->readers(s.table[i].block) > 1))
      out.push_back(i);
  return out;
}

/// The request asked for when it has blocks to move, else (unless only it will do) the one with the most.
const gpu::sequence* choose_request(const instance_state& st, const pick_blocks& ask) {
  const gpu::sequence* chosen = nullptr;
  if (auto it = st.requests.find(ask.req_id); it != st.requests.end() && !it->second.seq->finished() &&
                                              !movable_blocks(st, *it->second.seq, ask.max_blocks).empty())
    chosen = it->second.seq.get();
  for (const auto& s : st.batcher->active()) {
    if (ask.only_this || (chosen && chosen->id == ask.req_id)) break;
    if (!s->finished() && (!chosen || movable_blocks(st, *s, ask.max_blocks).size() >
                                          movable_blocks(st, *chosen, ask.max_blocks).size()))
      chosen = s.get();
  }
  return chosen;
}

}  // namespace

block_pick pick(self_ptr self, const pick_blocks& ask) {
  auto& st = self->state;
  const gpu::sequence* chosen = choose_request(st, ask);
  block_pick out{ask.id, chosen ? chosen->id : ask.req_id, {}, {}, st.config.id};
  if (!chosen) return out;
  for (uint32_t i : movable_blocks(st, *chosen, ask.max_blocks)) {
    out.logical.push_back(i);
    out.physical.push_back(chosen->table[i].block);
    st.moving.insert({chosen->id, i});
  }
  st.picks[ask.id] = {out.req_id, out.logical, out.physical};
  return out;
}

void unmark(self_ptr self, move_id id) {
  auto& st = self->state;
  auto it = st.picks.find(id);
  if (it == st.picks.end()) return;
  for (uint32_t i : it->second.logical) st.moving.erase({it->second.req, i});
  st.picks.erase(it);
}

caf::result<bool> on_blocks_moved(self_ptr self, const blocks_moved& m) {
  auto& st = self->state;
  if (!st.in_flight) {
    const bool ok = switch_blocks(self, m);
    maybe_step(self);
    return ok;
  }
  auto promise = self->make_response_promise<bool>();
  st.after_step.push_back([=]() mutable { promise.deliver(switch_blocks(self, m)); });
  return promise;
}

}  // namespace illm::actors::instance_impl
