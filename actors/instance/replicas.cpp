// Replicas, at the owner: which full blocks of its long requests lack a second copy (pick_replicas, all at one
// holder, marked as moving until the copy ends so that no move takes them meanwhile), where the copies are
// (blocks_replicated), and copies lost with the memory that held them (replicas_lost) or with their instance
// (a view without it). A request whose holder failed has the copies of the blocks it held promoted where they
// are, and goes on without computing them again; the blocks it held without a copy are computed again here, and
// only they (recover_from_replicas).
#include <fmt/format.h>

#include "actors/instance/state.hpp"

namespace illm::actors::instance_impl {

namespace {

/// Whether `seq` is a request whose blocks may be copied now: long enough, running here, not being prefilled.
bool replicable(const instance_state& st, const gpu::sequence& seq, uint32_t min_tokens) {
  return !seq.foreign() && !seq.finished() && !seq.held && !st.prefills.count(seq.id) &&
         seq.tokens.size() >= min_tokens;
}

/// Whether logical block `i` of `r` still lacks a copy and may be copied now (its holder a member).
bool wants_copy(const instance_state& st, const running_request& r, uint32_t i) {
  const gpu::block_ref where = r.seq->table[i];
  return !r.replicas.count(i) && !st.moving.count({r.seq->id, i}) &&
         (where.pool == st.config.id || st.view.has_member(where.pool));
}

}  // namespace

block_pick pick_replica_blocks(self_ptr self, const pick_replicas& ask) {
  auto& st = self->state;
  block_pick out{ask.id, 0, {}, {}, 0};
  for (const auto& [id, r] : st.requests) {
    const gpu::sequence& seq = *r.seq;
    if (!replicable(st, seq, ask.min_tokens)) continue;
    for (uint32_t i = 0; i < seq.full_blocks() && i < seq.table.size() && out.logical.size() < ask.max_blocks; ++i) {
      if (!wants_copy(st, r, i)) continue;
      if (out.logical.empty()) out.holder = seq.table[i].pool;
      if (seq.table[i].pool != out.holder) continue;
      out.logical.push_back(i);
      out.physical.push_back(seq.table[i].block);
    }
    if (out.logical.empty()) continue;
    out.req_id = id;
    for (uint32_t i : out.logical) st.moving.insert({id, i});
    st.picks[ask.id] = {id, out.logical, out.physical};
    break;
  }
  return out;
}

bool note_replicated(self_ptr self, const blocks_replicated& m) {
  auto& st = self->state;
  auto pick_it = st.picks.find(m.id);
  auto req_it = st.requests.find(m.req_id);
  bool ok = pick_it != st.picks.end() && req_it != st.requests.end() && !req_it->second.seq->finished() &&
            m.logical == pick_it->second.logical;
  for (size_t k = 0; ok && k < m.logical.size(); ++k)  // the table still holds the blocks that were copied
    ok = m.logical[k] < req_it->second.seq->table.size() &&
         req_it->second.seq->table[m.logical[k]].block == pick_it->second.physical[k] &&
         req_it->second.seq->table[m.logical[k]].pool != m.at;
  if (ok)
    for (uint32_t i : m.logical) req_it->second.replicas[i] = m.at;
  unmark(self, m.id);
  return ok;
}

void forget_replicas(self_ptr self, const replicas_lost& r) {
  auto it = self->state.requests.find(r.req_id);
  if (it == self->state.requests.end()) return;
  for (uint32_t i : r.logical)
    if (auto copy = it->second.replicas.find(i); copy != it->second.replicas.end() && copy->second == r.at)
      it->second.replicas.erase(copy);
}

std::vector<request_placement_entry> replica_placement(const running_request& r) {
  std::map<instance_id, uint32_t> per_instance;
  for (const auto& [logical, at] : r.replicas) ++per_instance[at];
  std::vector<request_placement_entry> out;
  for (const auto& [at, n] : per_instance) out.push_back({r.seq->id, at, n, false});
  return out;
}

void forget_departed_replicas(self_ptr self) {
  auto& st = self->state;
  for (auto& [id, r] : st.requests)
    std::erase_if(r.replicas, [&](const auto& copy) { return copy.second != st.config.id && !st.view.has_member(copy.second); });
}

namespace {

/// The copies' holders answered: the request reads the promoted copies from now on, or starts over.
void on_promoted(self_ptr self, request_id id, const promote_replicas& ask, const replicas_promoted& p) {
  auto& st = self->state;
  auto it = st.requests.find(id);
  if (it == st.requests.end() || it->second.seq->finished()) return;  // ended meanwhile: its release frees them
  gpu::sequence& seq = *it->second.seq;
  seq.held = false;
  const bool fits = p.ok && p.blocks.size() == ask.logical.size();
  if (!fits) {
    start_over(self, id, "its KV was lost and its copies could not be promoted: " + p.reason);
    return maybe_step(self);
  }
  for (size_t k = 0; k < ask.logical.size(); ++k) {
    seq.table[ask.logical[k]] = {ask.at[k], p.blocks[k]};
    it->second.replicas.erase(ask.logical[k]);
  }
  if (auto* m = st.config.metrics.get()) m->requests_recovered.with({std::to_string(st.config.id), "replica"}).add();
  maybe_step(self);
}

/// Whether a block at `at` is where the request can read it: here, or at a member not lost.
bool readable_at(const instance_state& st, instance_id at, const std::set<instance_id>& lost) {
  return at == st.config.id || (!lost.count(at) && st.view.has_member(at));
}

/// Whether `blocks` more blocks are free in this pool now (a loan may never come: a request waiting for one
/// with its KV half lost could wait for ever, so the lost blocks are computed again only into free ones here).
bool blocks_free_here(const instance_state& st, uint32_t blocks) {
  return uint64_t(st.config.pool->free_blocks()) >= uint64_t(blocks) + promised_blocks(st);
}

/// The lost blocks of `r` that have no copy are computed again, and only they (and the partial last block): the
/// batcher gives them blocks as prefill reaches them (here, or lent elsewhere); the blocks after them stay where
/// they are. False when this pool lacks free blocks for them (nothing changed then: the request starts over).
bool compute_again(self_ptr self, running_request& r, const std::vector<uint32_t>& logical) {
  auto& st = self->state;
  if (!blocks_free_here(st, uint32_t(logical.size()))) return false;
  for (uint32_t i : logical) r.replicas.erase(i);
  (void)r.seq->forget_lost_blocks(logical);  // the engine counts the positions as it computes them again
  return true;
}

}  // namespace

bool recover_from_replicas(self_ptr self, request_id id, const std::set<instance_id>& lost) {
  auto& st = self->state;
  auto it = st.requests.find(id);
  if (it == st.requests.end() || it->second.seq->finished() || it->second.seq->held || st.prefills.count(id))
    return false;
  gpu::sequence& seq = *it->second.seq;
  promote_replicas ask{id, st.config.id, {}, {}};
  std::vector<uint32_t> without_copy;
  for (uint32_t i = 0; i < seq.table.size(); ++i) {
    if (readable_at(st, seq.table[i].pool, lost)) continue;
    auto copy = it->second.replicas.find(i);
    if (copy == it->second.replicas.end() || !readable_at(st, copy->second, lost)) {
      without_copy.push_back(i);
      continue;
    }
    ask.logical.push_back(i);
    ask.at.push_back(copy->second);
  }
  if (ask.logical.empty() && without_copy.empty()) return false;
  if (!without_copy.empty() && !compute_again(self, it->second, without_copy)) return false;
  if (ask.logical.empty()) {  // nothing of what was lost had a copy
    if (auto* m = st.config.metrics.get()) m->requests_recovered.with({std::to_string(st.config.id), "recompute"}).add();
    return true;
  }
  seq.held = true;  // it sits out the steps until its copies are promoted
  self->request(st.config.rmanager, caf::infinite, ask)
      .then([=](const replicas_promoted& p) { on_promoted(self, id, ask, p); },
            [=](const caf::error& e) {
              on_promoted(self, id, ask, replicas_promoted{false, self->system().render(e), {}});
            });
  return true;
}

void note_kv_lost(self_ptr self, request_id id) {
  auto it = self->state.requests.find(id);
  if (it == self->state.requests.end() || it->second.lost_at_ns) return;
  it->second.lost_at_ns = now_ns(self);
  it->second.tokens_at_loss = it->second.seq->tokens.size();
}

void note_recovered_token(self_ptr self, running_request& r, const gpu::sequence& seq) {
  if (!r.lost_at_ns || seq.tokens.size() <= r.tokens_at_loss) return;
  if (auto* m = self->state.config.metrics.get())
    m->recovery_seconds.with({std::to_string(self->state.config.id)}).observe(double(now_ns(self) - r.lost_at_ns) / 1e9);
  r.lost_at_ns = 0;
}

}  // namespace illm::actors::instance_impl
