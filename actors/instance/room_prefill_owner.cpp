// Room prefill, at the owner: a long request's prompt handed in chunks to its room's holders
// (actors/logic/room_prefill.hpp plans them): each chunk's blocks reserved at its holder through the rManager
// (reserve_chunk), the chunk sent there (prefill_chunk), the next one sent once its step has started
// (chunk_started), and its blocks committed as hosted blocks of the request (commit_chunk) once written.
#include <fmt/format.h>

#include "actors/instance/state.hpp"

namespace illm::actors::instance_impl {

namespace {

/// Tokens of a room's chunk: a step's, less a decode token for every sequence a step may hold (at least half
/// a step), so that a holder runs one whole beside its own decode tokens.
int32_t chunk_tokens(const instance_state& st) {
  const int32_t b = gpu::kv_block_tokens, step = st.config.batch.max_batch_tokens;
  return std::max(b, std::max(step - st.config.batch.max_batch_seqs, step / 2) / b * b);
}

void hand_out_chunk(self_ptr self, request_id req);

/// The room's holders stop prefilling `req` (a chunk failed, or a holder is gone): it starts over from its
/// tokens, its chunks' reservations given back.
void abandon_room_prefill(self_ptr self, request_id req, const std::string& why) {
  auto& st = self->state;
  auto it = st.prefills.find(req);
  if (it == st.prefills.end()) return;
  for (move_id id : it->second.under_way()) {
    self->send(st.config.rmanager, abort_chunk{id});
    st.chunk_requests.erase(id);
  }
  const int32_t committed = it->second.committed();  // the holders' KV up to there is lost with the room
  st.prefills.erase(it);
  if (auto r = st.requests.find(req); r != st.requests.end()) {
    r->second.seq->held = false;
    r->second.seq->lost_below = std::max(r->second.seq->lost_below, int(committed));
  }
  start_over(self, req, why);
  maybe_step(self);
}

/// Every chunk is committed: this instance prefills the rest of the prompt and decodes.
void end_room_prefill(self_ptr self, request_id req) {
  auto& st = self->state;
  auto it = st.prefills.find(req);
  auto r = st.requests.find(req);
  if (it == st.prefills.end() || r == st.requests.end()) return;
  gpu::sequence& seq = *r->second.seq;
  note_recomputed(self, seq.note_computed(seq.n_cached, it->second.covered()));  // the holders computed them
  seq.n_cached = it->second.covered();
  seq.table.resize(gpu::blocks_for_tokens(seq.n_cached));
  seq.held = false;
  st.prefills.erase(it);
  publish_placement(self);
  maybe_step(self);
}

/// Chunk `id` of `req`'s room prefill, its plan and the request's sequence, while all are under way.
struct chunk_under_way {
  room_prefill_plan* plan;
  gpu::sequence* seq;
  room_prefill_plan::chunk chunk;
};

std::optional<chunk_under_way> find_chunk(instance_state& st, request_id req, move_id id) {
  auto it = st.prefills.find(req);
  auto r = st.requests.find(req);
  if (it == st.prefills.end() || r == st.requests.end()) return std::nullopt;
  const auto c = it->second.chunk_of(id);
  if (!c) return std::nullopt;
  return chunk_under_way{&it->second, r->second.seq.get(), *c};
}

void on_chunk_done(self_ptr self, request_id req, move_id id, const chunk_done& done);

/// The chunk's positions and the table up to its end, for its holder.
prefill_chunk chunk_message(const instance_state& st, move_id id, request_id req, const gpu::sequence& seq,
                            const room_prefill_plan::chunk& c) {
  prefill_chunk chunk{id, st.config.id, req, c.pos0, {}, {}, {}, {}};
  chunk.tokens.assign(seq.tokens.begin() + c.pos0, seq.tokens.begin() + c.end);
  for (size_t b = 0; b < size_t(c.end / gpu::kv_block_tokens); ++b) {
    chunk.table_pools.push_back(seq.table[b].pool);
    chunk.table_blocks.push_back(seq.table[b].block);
  }
  return chunk;
}

/// A chunk's blocks are reserved at its holder (or not): hand it over with the table up to its end.
void on_chunk_reserved(self_ptr self, request_id req, move_id id, const move_reservation& reservation) {
  auto& st = self->state;
  const auto found = find_chunk(st, req, id);
  if (!found) {  // it ended or started over meanwhile
    if (reservation.granted) self->send(st.config.rmanager, abort_chunk{id});
    return;
  }
  const auto& [plan, seq, c] = *found;
  const instance_view* holder = st.view.find(c.holder);
  if (!reservation.granted || !holder || !holder->instance) {
    if (reservation.granted) self->send(st.config.rmanager, abort_chunk{id});
    plan->refused(id);
    st.chunk_requests.erase(id);
    return hand_out_chunk(self, req);
  }
  for (uint32_t b : reservation.blocks) seq->table.push_back({c.holder, b});  // chunks go out in order
  prefill_chunk chunk = chunk_message(st, id, req, *seq, c);
  chunk.owner_instance = instance_actor{self};
  publish_placement(self);
  self->request(holder->instance, caf::infinite, std::move(chunk))
      .then([=](const chunk_done& d) { on_chunk_done(self, req, id, d); },
            [=](const caf::error& e) { on_chunk_done(self, req, id, chunk_done{id, false, self->system().render(e)}); });
}

/// Asks for the next chunk of `req`'s prompt, if one may go now; ends the room prefill once none will.
void hand_out_chunk(self_ptr self, request_id req) {
  auto& st = self->state;
  auto it = st.prefills.find(req);
  if (it == st.prefills.end()) return;
  if (it->second.finished()) return end_room_prefill(self, req);
  const auto next = it->second.next();
  if (!next) return;
  const move_id id = (uint64_t(st.config.id) + 1) << 40 | uint64_t(1) << 39 | st.next_chunk++;
  it->second.asked(id, *next);
  st.chunk_requests[id] = req;
  self->request(st.config.rmanager, caf::infinite, reserve_chunk{id, req, next->holder, next->blocks})
      .then([=](const move_reservation& r) { on_chunk_reserved(self, req, id, r); },
            [=](const caf::error& e) {
              move_reservation refused;
              refused.id = id;
              refused.reason = self->system().render(e);
              on_chunk_reserved(self, req, id, refused);
            });
}

/// The holder turned chunk `id` down before computing it: it goes elsewhere (that holder gets no more), its
/// reservation given back.
void turn_down_chunk(self_ptr self, const chunk_under_way& at, request_id req, move_id id) {
  auto& st = self->state;
  self->send(st.config.rmanager, abort_chunk{id});
  at.seq->table.resize(size_t(at.chunk.pos0 / gpu::kv_block_tokens));  // it was the last chunk handed out
  at.plan->refused(id);
  st.chunk_requests.erase(id);
  publish_placement(self);
  hand_out_chunk(self, req);
}

/// The rManager's answer to a chunk's commit.
void on_chunk_committed(self_ptr self, request_id req, move_id id, bool committed) {
  auto& st = self->state;
  const auto now = find_chunk(st, req, id);
  if (!now) return;
  if (!committed) return abandon_room_prefill(self, req, "its holder did not commit a chunk of its prompt");
  now->plan->committed(id);
  st.chunk_requests.erase(id);
  hand_out_chunk(self, req);
}

void on_chunk_done(self_ptr self, request_id req, move_id id, const chunk_done& done) {
  auto& st = self->state;
  const auto found = find_chunk(st, req, id);
  if (!found) return;  // given up meanwhile
  const room_prefill_plan::chunk& c = found->chunk;
  if (!done.ok && !found->plan->has_started(id)) return turn_down_chunk(self, *found, req, id);
  if (!done.ok)
    return abandon_room_prefill(self, req, fmt::format("a chunk of its prompt at instance {} failed: {}", c.holder,
                                                       done.reason));
  commit_chunk commit{id, req, {}};
  for (int32_t b = c.pos0 / gpu::kv_block_tokens; b < c.end / gpu::kv_block_tokens; ++b)
    commit.logical.push_back(uint32_t(b));
  self->request(st.config.rmanager, caf::infinite, std::move(commit))
      .then([=](bool committed) { on_chunk_committed(self, req, id, committed); },
            [=](const caf::error& e) { abandon_room_prefill(self, req, "no commit: " + self->system().render(e)); });
}

}  // namespace

void begin_room_prefill(self_ptr self, request_id req) {
  auto& st = self->state;
  auto r = st.requests.find(req);
  if (r == st.requests.end() || st.config.batch.room_prefill_min_chunks <= 0) return;
  gpu::sequence& seq = *r->second.seq;
  if (size_t(seq.n_cached) != seq.table.size() * gpu::kv_block_tokens) return;
  if (seq.prompt_logprobs >= 0) return;  // its prompt's log probabilities come from the owner's logits
  auto plan = room_prefill_plan::make(seq.n_cached, int32_t(seq.tokens.size()), chunk_tokens(st), st.granted_holders,
                                      st.config.batch.room_prefill_min_chunks);
  if (!plan) return;
  seq.held = true;
  st.prefills.insert_or_assign(req, std::move(*plan));
  hand_out_chunk(self, req);
}

void on_chunk_started(self_ptr self, move_id id) {
  auto& st = self->state;
  auto req = st.chunk_requests.find(id);
  if (req == st.chunk_requests.end()) return;
  const request_id r = req->second;
  if (auto it = st.prefills.find(r); it != st.prefills.end()) it->second.started(id);
  hand_out_chunk(self, r);
}

void check_prefill_holders(self_ptr self) {
  auto& st = self->state;
  std::vector<std::pair<request_id, instance_id>> lost;
  for (const auto& [req, plan] : st.prefills)
    for (move_id id : plan.under_way())
      if (!st.view.has_member(plan.holder_of(id))) lost.emplace_back(req, plan.holder_of(id));
  for (const auto& [req, holder] : lost)
    abandon_room_prefill(self, req, fmt::format("instance {}, prefilling a chunk of its prompt, is gone", holder));
}

}  // namespace illm::actors::instance_impl
