// Room prefill at the owner's rManager: a chunk's blocks reserved at its holder out of the room there
// (reserve_chunk -> try_move_kvcache), committed once the holder wrote them (commit_chunk -> commit_move) and
// reported as a move that copied nothing, or given back (abort_chunk).
#include <fmt/format.h>

#include "actors/rmanager/state.hpp"

namespace illm::actors::rmanager_impl {

namespace {

move_reservation refused_reservation(move_id id, instance_id holder, std::string reason) {
  move_reservation r;
  r.id = id;
  r.dst_inst = holder;
  r.reason = std::move(reason);
  return r;
}

}  // namespace

/// Reserves a chunk's blocks at its holder, out of the request's room there (the instance hands the chunk to
/// the holder once it has them).
caf::result<move_reservation> reserve_for_chunk(self_ptr self, const reserve_chunk& c) {
  auto& st = self->state;
  const instance_view* holder = st.view.find(c.holder);
  if (!holder || !holder->rmanager || c.holder == st.config.id || !reachable(st, c.holder))
    return refused_reservation(c.id, c.holder, fmt::format("instance {} is not a holder now", c.holder));
  auto promise = self->make_response_promise<move_reservation>();
  rmanager_actor dst = holder->rmanager;
  self->request(dst, st.config.answer_timeout, try_move_kvcache{c.id, c.req_id, c.num_blocks, st.config.id, false, st.config.kv})
      .then(
          [=](move_reservation& r) mutable {
            if (r.granted && r.blocks.size() != c.num_blocks) {
              self->send(dst, abort_move{c.id});
              r = refused_reservation(c.id, c.holder, "the reservation does not match the chunk");
            }
            if (r.granted) self->state.chunks[c.id] = {c.req_id, c.holder, dst, c.num_blocks};
            if (r.granted && crashes_at(self, faults::crash_point::mid_room)) return;
            promise.deliver(std::move(r));
          },
          [=](const caf::error& err) mutable {
            promise.deliver(refused_reservation(c.id, c.holder, "no answer: " + self->system().render(err)));
          });
  return promise;
}

namespace {

/// Reports how a chunk's placement ended, as a move (computed where it lives, nothing copied).
void report_chunk(self_ptr self, move_id id, const outgoing_chunk& c, bool ok, std::string reason) {
  auto& st = self->state;
  const move_report report{id, c.req, st.config.id, c.dst, c.blocks, ok, false, std::move(reason), true};
  if (st.config.events) st.config.events->record(report);
  if (st.config.gmanager) self->send(st.config.gmanager, report);
}

}  // namespace

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
            if (r.ok)
              note_placed(self->state, chunk.req, chunk.dst, chunk.blocks);
            else
              self->send(chunk.dst_rmanager, abort_move{c.id});
            report_chunk(self, c.id, chunk, r.ok, r.ok ? "" : "commit refused: " + r.reason);
            promise.deliver(r.ok);
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

}  // namespace illm::actors::rmanager_impl
