// The instance actor: its state's shared helpers and the composition of its behaviour from the protocol
// files listed in state.hpp.
#include <algorithm>

#include "actors/faults/hang.hpp"
#include "actors/instance/state.hpp"

namespace illm::actors {
namespace instance_impl {

local_blocks::local_blocks(std::shared_ptr<gpu::kv_pool> pool, instance_id id,
                           std::shared_ptr<gpu::prefix_cache> cache, gpu::block_key root,
                           std::function<bool(const gpu::sequence&)> may_take)
    : pool_(std::move(pool)), id_(id), cache_(std::move(cache)), root_(root), may_take_(std::move(may_take)) {}

gpu::result<gpu::block_ref> local_blocks::allocate(const gpu::sequence& seq, uint32_t) {
  if (may_take_ && !may_take_(seq)) return gpu::status{gpu::status_code::out_of_blocks, "no spare block here"};
  auto block = pool_->allocate({seq.id, id_});
  if (!block.is_ok()) return block.error();
  return gpu::block_ref{id_, block.value()};
}

gpu::status local_blocks::release(const gpu::block_ref& ref) {
  if (ref.pool != id_ || (cache_ && cache_->release(ref.block))) return gpu::status::ok();
  return pool_->release(ref.block);
}

int local_blocks::attach_prefix(gpu::sequence& seq) {
  return cache_ ? gpu::attach_cached_prefix(*cache_, root_, id_, seq) : 0;
}

void local_blocks::blocks_computed(gpu::sequence& seq) {
  if (cache_) gpu::offer_computed_blocks(*cache_, root_, id_, seq);
}

void local_blocks::finishing(gpu::sequence& seq) {
  if (cache_) seq.keyed_elsewhere = gpu::keyed_blocks_elsewhere(root_, id_, seq);
}

int64_t now_ns(caf::local_actor* self) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(self->clock().now().time_since_epoch()).count();
}

void note_recomputed(self_ptr self, int positions) {
  if (auto* m = self->state.config.metrics.get(); m && positions > 0)
    m->positions_recomputed.with({std::to_string(self->state.config.id)}).add(double(positions));
}

std::vector<request_placement_entry> placement_of(const gpu::sequence& seq, instance_id self_id) {
  std::vector<request_placement_entry> out;  // a few pools at most: a flat list, by pool
  for (const gpu::block_ref& ref : seq.table) {
    if (ref.absent()) continue;
    auto at = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.inst_id == ref.pool; });
    if (at == out.end()) at = out.insert(std::upper_bound(out.begin(), out.end(), ref.pool,
                                                          [](uint32_t pool, const auto& e) { return pool < e.inst_id; }),
                                         {seq.id, ref.pool, 0, ref.pool == self_id});
    ++at->num_blocks;
  }
  return out;
}

uint32_t blocks_here(const instance_state& st, const gpu::sequence& seq) {
  return uint32_t(std::count_if(seq.table.begin(), seq.table.end(),
                                [&](const gpu::block_ref& b) { return b.pool == st.config.id; }));
}

/// All a running sequence will grow, or for a request with a room, what its working set here lacks.
uint32_t promised_blocks(const instance_state& st) {
  uint32_t promised = 0;
  for (const auto& s : st.batcher->active()) {
    const int64_t grows = int64_t(admission::blocks_needed(s->tokens.size(), s->max_new_tokens - s->n_generated())) -
                          int64_t(s->blocks_held());
    if (grows <= 0 || s->foreign()) continue;
    const auto room = st.with_room.find(s->id);
    if (room == st.with_room.end()) {
      promised += uint32_t(grows);
      continue;
    }
    promised += uint32_t(std::min<int64_t>(grows, std::max<int64_t>(0, int64_t(room->second) - blocks_here(st, *s))));
  }
  return promised;
}

namespace {

/// Blocks the head of the queue keeps here when the room granted to it starts it (0: it has no room yet).
uint32_t granted_keep(const instance_state& st) {
  return !st.waiting.empty() && st.room_granted == st.waiting.front().id ? st.room_keep : 0;
}

}  // namespace

/// What the running requests will still take here (before blocks that become theirs are freed: the rManager
/// lends only what is not promised), what the request first in the queue needs (lent away, those blocks would
/// leave this GPU idle while others' KV fills its pool), and what a head whose room is granted keeps here:
/// were those blocks promised to a later room, it would wait for that room's request while that one waited.
void note_promised(const instance_state& st) {
  if (!st.config.promises) return;
  st.config.promises->set_running(promised_blocks(st));
  st.config.promises->set_kept(granted_keep(st));
  const generate_request* head = st.waiting.empty() ? nullptr : &st.waiting.front();
  const uint32_t need = head ? admission::blocks_needed(head->params.prompt.size(), head->params.max_tokens) : 0;
  st.config.promises->set_queued(need <= st.config.pool->total_blocks() ? need : 0);
}

namespace {

/// The prefix cache's counters since `published` into the metrics, and its blocks now (`token_bytes`: KV bytes per
/// token of the pool).
void publish_cache_metrics(metrics::runtime_metrics& m, instance_id id, const gpu::prefix_cache_stats& now,
                           gpu::prefix_cache_stats& published, double token_bytes) {
  const std::string instance = std::to_string(id);
  m.prefix_cache_queries.with({instance}).add(double(now.queried_tokens - published.queried_tokens));
  const double local = double(now.hit_tokens - published.hit_tokens);
  const double remote = double(now.remote_hit_tokens - published.remote_hit_tokens);
  m.prefix_cache_hits.with({instance, "local"}).add(local);
  m.prefix_cache_hits.with({instance, "remote"}).add(remote);
  m.prefix_cache_hit_bytes.with({instance, "local"}).add(local * token_bytes);
  m.prefix_cache_hit_bytes.with({instance, "remote"}).add(remote * token_bytes);
  m.prefix_cache_evicted.with({instance}).add(double(now.evicted_blocks - published.evicted_blocks));
  m.prefix_cache_blocks.with({instance, "read"}).set(now.read_blocks);
  m.prefix_cache_blocks.with({instance, "idle"}).set(now.cached_blocks - now.read_blocks);
  published = now;
}

}  // namespace

void publish_placement(self_ptr self) {
  auto& st = self->state;
  note_promised(st);
  placement_update update;
  for (const auto& s : st.batcher->active())
    if (!s->foreign())  // a chunk's blocks are its owner's to report
      for (const auto& e : placement_of(*s, st.config.id)) update.placement.push_back(e);
  update.batch_size = uint32_t(st.batcher->active().size());
  update.waiting = uint32_t(st.waiting.size() + st.pausing.size());
  for (const auto& r : st.waiting) update.waiting_blocks += admission::blocks_needed(r.params.prompt.size(), r.params.max_tokens);
  update.promised_blocks = promised_blocks(st);
  if (auto* m = st.config.metrics.get()) {
    const metrics::label_values instance{std::to_string(st.config.id)};
    m->requests_running.with(instance).set(update.batch_size);
    m->requests_waiting.with(instance).set(update.waiting);
    if (st.config.prefix_cache)
      publish_cache_metrics(*m, st.config.id, st.config.prefix_cache->stats(), st.cache_published,
                            double(st.config.pool->layout().block_bytes()) / gpu::kv_block_tokens);
  }
  self->send(st.config.rmanager, std::move(update));
}

/// The rManager releases its blocks elsewhere and its room (and gives its chunks' reservations back), and its
/// moves and room prefill under way are forgotten.
void release_elsewhere(self_ptr self, request_id req, std::vector<gpu::keyed_block> kept) {
  auto& st = self->state;
  self->send(st.config.rmanager, request_released{req, std::move(kept)});
  st.with_room.erase(req);
  if (auto p = st.prefills.find(req); p != st.prefills.end()) {
    for (move_id id : p->second.under_way()) st.chunk_requests.erase(id);
    st.prefills.erase(p);
  }
  for (auto m = st.moving.begin(); m != st.moving.end();) m = m->first == req ? st.moving.erase(m) : std::next(m);
  for (auto p = st.picks.begin(); p != st.picks.end();) p = p->second.req == req ? st.picks.erase(p) : std::next(p);
}

namespace {

instance_actor::behavior_type instance_behavior(self_ptr self, instance_config config) {
  auto& st = self->state;
  faults::silent_when_told(self);
  st.config = std::move(config);
  st.blocks = std::make_unique<local_blocks>(st.config.pool, st.config.id, st.config.prefix_cache,
                                             st.config.prefix_root,
                                             [self](const gpu::sequence& seq) { return may_take_block(self->state, seq); });
  st.batcher = std::make_unique<gpu::batcher>(*st.blocks, batch_options(self));
  return {
      // admission: requests in, rooms and loans for them
      [=](generate_request& r) { on_generate(self, r); },
      [=](const cancel_request& c) { on_cancel(self, c); },
      [=](requeue_atom, request_id id) { on_requeue(self, id); },
      [=](recheck_atom) { on_recheck(self); },
      [=](const room_answer& a) { on_room_answer(self, a); },
      [=](const loan_result& r) { on_loan_result(self, r); },
      // the step loop's view of the cluster
      [=](cluster_view& v) { on_view(self, v); },
      // block moves, with the rManager as the move's source
      [=](const pick_blocks& ask) { return pick(self, ask); },
      [=](const blocks_moved& m) { return on_blocks_moved(self, m); },
      [=](const move_abandoned& m) { unmark(self, m.id); },
      // room prefill: chunks computed here for others, and this instance's chunks started elsewhere
      [=](prefill_chunk& c) { return accept_chunk(self, c); },
      [=](const cancel_chunk& c) { on_cancel_chunk(self, c); },
      [=](const chunk_started& c) { on_chunk_started(self, c.id); },
      // replicas: blocks picked for a copy, copies made, copies lost
      [=](const pick_replicas& ask) { return pick_replica_blocks(self, ask); },
      [=](const blocks_replicated& m) { return note_replicated(self, m); },
      [=](const replicas_lost& r) { forget_replicas(self, r); },
  };
}

}  // namespace
}  // namespace instance_impl

instance_actor spawn_instance(caf::actor_system& sys, instance_config config) {
  return sys.spawn(instance_impl::instance_behavior, std::move(config));
}

}  // namespace illm::actors
