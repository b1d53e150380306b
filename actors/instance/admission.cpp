// The instance's admission protocol: requests arrive (generate_request, cancel_request), wait in its queue,
// and start when actors/admission's policy lets them; meanwhile the instance asks for a room (room_answer)
// or a loan (loan_result). A request whose KV was lost starts over here from its tokens.
#include <algorithm>

#include <fmt/format.h>

#include "actors/instance/state.hpp"
#include "gpu/grammar/constraint_cache.hpp"

namespace illm::actors::instance_impl {

namespace {

/// How often a request starts over after holders of its KV failed before it ends with the error.
constexpr uint32_t max_kv_losses = 5;  // with restart_pause: it outlasts a holder cut off for about 3 s

void refuse(self_ptr self, const generate_request& r, std::string why) {
  tell_client(self, r.client, request_finished{r.id, "error", std::move(why), 0, {}});
}

/// Whether another instance has blocks this one may move into.
bool others_have_free(const instance_state& st) {
  return std::any_of(st.view.instances.begin(), st.view.instances.end(), [&](const instance_view& i) {
    return i.inst_id != st.config.id && !i.draining && i.movable_into() > 0;
  });
}

/// The blocks a request may have in all: the cluster's, or (without lending or a view) the pool's.
uint32_t capacity_for(const instance_state& st) {
  if (!st.have_view || !st.config.lending) return st.config.pool->total_blocks();
  uint64_t capacity = 0;  // members late with their heartbeats count: their pools are still there
  for (const auto& i : st.view.instances) capacity += i.total_blocks;
  return uint32_t(std::min<uint64_t>(std::max(capacity, st.view.member_blocks), UINT32_MAX));
}

/// Asks for room elsewhere for a request that keeps `ask.keep` of its `ask.need` blocks here (once; again
/// after a refusal and a view).
void ask_room(self_ptr self, request_id req, const admission::room_ask& ask) {
  auto& st = self->state;
  if (st.room_asked || st.rooms_refused) return;
  st.room_asked = req;
  st.room_keep = ask.keep;
  self->send(st.config.rmanager, reserve_room{st.config.id, req, ask.need - ask.keep});
}

/// Blocks the gManager has this instance keep free for a long request waiting for room (latest view).
uint32_t held_for_room(const instance_state& st) {
  const instance_view* me = st.view.find(st.config.id);
  return me ? me->held_for_room : 0;
}

admission::pool_facts pool_facts_of(const instance_state& st, uint32_t promised) {
  admission::pool_facts p;
  p.total = st.config.pool->total_blocks();
  p.free = st.config.pool->free_blocks();
  p.promised = promised;
  p.held_for_room = held_for_room(st);
  if (const auto* rooms = st.config.promises.get()) {
    p.tracks_rooms = true;
    p.rooms = rooms->rooms_total();
    p.rooms_overdrawn = rooms->overdrawn();
  }
  return p;
}

uint32_t blocks_for_new(const instance_state& st, uint32_t need, uint32_t promised, bool granted = false) {
  return admission::blocks_for_new(pool_facts_of(st, promised), need, granted);
}

uint32_t working_set(const instance_state& st) {
  return admission::working_set(st.config.batch.max_batch_tokens, st.config.pool->total_blocks());
}

/// Decides about the head of the queue and asks for the room or loan the decision names.
admission::verdict judge(self_ptr self, uint32_t need, uint32_t promised) {
  auto& st = self->state;
  const generate_request& r = st.waiting.front();
  admission::head_facts h;
  h.need = need;
  h.capacity = capacity_for(st);
  h.pool_total = st.config.pool->total_blocks();
  h.room_granted = st.room_granted == r.id;
  h.fits_here = blocks_for_new(st, need, promised, h.room_granted) + adopted_blocks(st, r.id).here;
  h.working_set = working_set(st);
  h.lending = st.config.lending;
  h.view_newer = st.views_received > st.waiting_since.front();
  h.room_keep = st.room_keep;
  h.room_too_big = st.room_too_big == r.id;
  h.idle = st.batcher->idle();
  h.rooms_running = !st.with_room.empty();
  const admission::decision d = admission::judge_head(h);
  if (d.room) ask_room(self, r.id, *d.room);
  if (d.loan_blocks) ask_loan(self, 0, *d.loan_blocks);
  return d.what;
}

/// Whether the blocks the head asked to keep here were promised to other rooms since it asked (granted
/// between its ask and its own grant): waiting for them, it could wait for a request that waits for it.
bool keep_promised_since(const instance_state& st) {
  if (st.waiting.empty() || !st.config.promises) return false;
  const uint32_t free = st.config.pool->free_blocks(), running = promised_blocks(st);
  const uint32_t unpromised = free - std::min(free, running);
  const uint32_t rooms = st.config.promises->rooms_total();
  return unpromised >= st.room_keep && unpromised - std::min(unpromised, rooms) < st.room_keep;
}

/// Gives a granted room back (its holders forget it) and asks again after the next view.
void give_up_room(self_ptr self, request_id req) {
  auto& st = self->state;
  self->send(st.config.rmanager, request_released{req});
  st.rooms_refused = true;
}

/// Blocks of this pool's prefix cache that a queued request will read when it starts and that other requests read
/// now: they take no memory more (the cached blocks nobody reads are free memory, counted as such). None for a
/// request whose table starts with blocks it took over or found elsewhere (it reads no more of the cache).
uint32_t read_with_others(const instance_state& st, const generate_request& r) {
  if (!st.config.prefix_cache || r.params.prompt_logprobs >= 0 || st.adopted.count(r.id) ||
      st.config.prefix_cache->stats().read_blocks == 0)
    return 0;
  const gpu::block_key root = gpu::scoped_root(st.config.prefix_root, r.params.cache_scope);
  return uint32_t(st.config.prefix_cache->read_prefix_blocks(root, r.params.prompt));
}

/// Blocks a queued request needs of this pool and its room: those for its prompt and answer, less those it took
/// over elsewhere (those it took over here are among them, and among the blocks it may have: judge) and the cached
/// blocks it will read with other requests.
uint32_t blocks_needed_here(const instance_state& st, const generate_request& r) {
  const uint32_t all = admission::blocks_needed(r.params.prompt.size(), r.params.max_tokens);
  return all - std::min(all, adopted_blocks(st, r.id).elsewhere + read_with_others(st, r));
}

/// The grammar `r`'s output keeps to, from `constraints`, into `seq` (started at the output so far); a request
/// whose grammar cannot be had ends with the reason.
void constrain(gpu::sequence& seq, const generate_request& r, gpu::grammar::constraint_cache* constraints) {
  if (r.params.constraint.empty()) return;
  auto made = constraints ? constraints->get(r.params.constraint)
                          : gpu::result<std::shared_ptr<const gpu::grammar::constraint>>(gpu::status{
                                gpu::status_code::unsupported, "this instance has no vocabulary for structured outputs"});
  if (made.is_ok()) {
    seq.sampling.constraint = made.value();
    if (seq.start_constraint()) return;
    made = gpu::status{gpu::status_code::invalid_argument, "the output so far is outside its grammar"};
  }
  seq.finish = gpu::finish_reason::error;
  seq.error = made.error().message();
}

/// A new sequence for a queued request.
std::shared_ptr<gpu::sequence> sequence_of(const generate_request& r, gpu::grammar::constraint_cache* constraints) {
  auto seq = std::make_shared<gpu::sequence>();
  seq->id = r.id;
  seq->tokens = r.params.prompt;
  seq->n_prompt = int(r.params.prompt.size());
  seq->sampling = sampling_of(r.params);
  seq->output_before = r.params.output_before;
  if (r.params.output_before == 0) seq->prompt_logprobs = r.params.prompt_logprobs;  // else sent with its first token
  seq->rng = r.params.seed;
  seq->max_new_tokens = r.params.max_tokens;
  seq->ignore_eos = r.params.ignore_eos;
  seq->stop_ids = r.params.stop_ids;
  seq->lost_below = int(r.lost_positions);
  seq->cache_scope = r.params.cache_scope;
  constrain(*seq, r, constraints);
  return seq;
}

/// Puts the waiting request at `index` of the queue into the batch.
void start_waiting(self_ptr self, size_t index) {
  auto& st = self->state;
  const generate_request& r = st.waiting[index];
  if (auto resumed = st.resuming.find(r.id); resumed != st.resuming.end()) {
    if (auto running = st.requests.find(r.id); running != st.requests.end()) apply_adopted(self, running->second);
    st.batcher->add(std::move(resumed->second));  // its running_request (tokens streamed so far) stays
    st.resuming.erase(resumed);
  } else {
    auto seq = sequence_of(r, st.config.constraints.get());
    running_request& started = st.requests[r.id] = {r.client, seq, 0, {}};
    apply_adopted(self, started);
    st.batcher->add(seq);
  }
  const bool granted = st.room_granted == r.id;
  if (granted) {
    st.room_granted = 0;
    st.with_room[r.id] = st.room_keep;
  }
  const request_id id = r.id;
  st.waiting.erase(st.waiting.begin() + ptrdiff_t(index));
  st.waiting_since.erase(st.waiting_since.begin() + ptrdiff_t(index));
  if (granted) begin_room_prefill(self, id);
}

/// Starts requests queued behind a long request that waits for its room: those that fit here whole and
/// leave the blocks it keeps here when its room comes. They end long before a room is free (it waits for
/// blocks all over the cluster), and without them the instance would idle with its pool free.
void backfill(self_ptr self, uint32_t head_need, uint32_t promised) {
  auto& st = self->state;
  const uint32_t keep = admission::head_keeps(head_need, st.config.pool->total_blocks(),
                                              st.room_granted == st.waiting.front().id, st.room_keep, working_set(st));
  if (keep == 0) return;
  for (size_t i = 1; i < st.waiting.size() && int(st.batcher->active().size()) < st.config.batch.max_batch_seqs;) {
    const uint32_t need = blocks_needed_here(st, st.waiting[i]);
    if (!admission::may_backfill(need, st.config.pool->total_blocks(), keep, blocks_for_new(st, need, promised))) {
      ++i;
      continue;
    }
    start_waiting(self, i);
    promised = promised_blocks(st);
  }
}

/// Ends the head of the queue with an error: the cluster cannot hold it.
void refuse_head(self_ptr self, uint32_t need) {
  auto& st = self->state;
  const generate_request& r = st.waiting.front();
  refuse(self, r, fmt::format("the request needs {} KV blocks; the cluster has {}", need, capacity_for(st)));
  drop_adopted(self, r.id);
  st.requests.erase(r.id);  // one that started over
  st.resuming.erase(r.id);
  st.waiting.pop_front();
  st.waiting_since.pop_front();
}

}  // namespace

bool ask_loan(self_ptr self, request_id req, uint32_t blocks) {
  auto& st = self->state;
  if (st.loan_pending) return true;
  // A request with a room borrows from its holders; others from whoever has spare blocks.
  const bool has_room = st.with_room.count(req) > 0;
  if (!st.config.lending || st.loans_refused || (!has_room && !others_have_free(st))) return false;
  st.loan_pending = true;
  self->send(st.config.rmanager, need_blocks{req, std::max(blocks, st.config.min_loan_blocks)});
  return true;
}

/// A request with a room takes those it keeps here, beyond them only spare ones (spoken for by no running
/// request, promised to no room). Else it could take blocks promised to another's room, and wait for its own
/// room while that room waited for it.
bool may_take_block(const instance_state& st, const gpu::sequence& seq) {
  const auto room = st.with_room.find(seq.id);
  if (room == st.with_room.end()) return true;
  if (blocks_here(st, seq) < room->second) return true;
  const uint32_t free = st.config.pool->free_blocks(), rooms = st.config.promises ? st.config.promises->rooms_total() : 0;
  return free > uint64_t(promised_blocks(st)) + rooms;
}

void admit(self_ptr self) {
  auto& st = self->state;
  uint32_t promised = promised_blocks(st);
  bool admitted = false;
  while (!st.waiting.empty() && int(st.batcher->active().size()) < st.config.batch.max_batch_seqs) {
    const uint32_t need = blocks_needed_here(st, st.waiting.front());
    const admission::verdict v = judge(self, need, promised);
    if (v == admission::verdict::wait) {
      const size_t before = st.waiting.size();
      backfill(self, need, promised);
      admitted = admitted || st.waiting.size() < before;
      break;
    }
    if (v == admission::verdict::refuse) {
      refuse_head(self, need);
      continue;
    }
    start_waiting(self, 0);
    promised = promised_blocks(st);
    admitted = true;
  }
  if (admitted) publish_placement(self);  // the rManager lends only blocks not promised: tell it at once
}

/// How long a request that lost its KV for the `losses`-th time waits before it queues again: not at all the
/// first time (its holder died: the survivors serve it), then 250 ms, 500 ms, 1 s, 2 s (a holder cut off for
/// a while may be chosen again: the pauses outlast a short partition).
static std::chrono::milliseconds restart_pause(uint32_t losses) {
  return losses < 2 ? std::chrono::milliseconds(0) : std::chrono::milliseconds(250) * (1 << std::min(losses - 2, 3u));
}

void queue_first(self_ptr self, generate_request r) {
  auto& st = self->state;
  const bool head_has_room = !st.waiting.empty() && (st.room_asked == st.waiting.front().id ||
                                                     st.room_granted == st.waiting.front().id);
  const auto at = head_has_room ? 1 : 0;
  st.waiting.insert(st.waiting.begin() + at, std::move(r));
  st.waiting_since.insert(st.waiting_since.begin() + at, st.views_received);
}

/// Its tokens are prompt and answer so far, its sampling state kept, so the answer goes on as it would have;
/// it goes first in the queue but behind a head whose room is under way, once its blocks elsewhere and its
/// room are released; from its second loss on it pauses first (restart_pause). One that lost KV more than
/// max_kv_losses times ends with the error.
void start_over(self_ptr self, request_id id, const std::string& why, const std::set<instance_id>& failed) {
  auto& st = self->state;
  auto req = st.requests.find(id);
  if (req == st.requests.end() || req->second.seq->finished()) return;
  gpu::sequence& running = *req->second.seq;
  if (++req->second.kv_losses > max_kv_losses) {
    running.finish = gpu::finish_reason::error;  // retired and reported at the next plan
    running.error = fmt::format("{} (its KV was lost {} times)", why, req->second.kv_losses);
    return;
  }
  running.mark_all_lost();  // its positions with KV are computed again (counted as the engine computes them)
  std::shared_ptr<gpu::sequence> seq = st.batcher->take_back(id);
  if (!seq) return;
  release_elsewhere(self, id);
  req->second.replicas.clear();  // released with its blocks elsewhere
  note_kv_lost(self, id);
  if (auto* m = st.config.metrics.get()) {
    const std::string instance = std::to_string(st.config.id);
    m->requests_restarted.with({instance}).add();
    m->requests_recovered.with({instance, "recompute"}).add();
  }
  const int32_t left = seq->max_new_tokens - seq->n_generated();
  generate_request again{id, {seq->tokens, left, 0.0f, 1.0f, seq->rng, seq->ignore_eos, seq->stop_ids},
                         req->second.client};
  set_sampling(again.params, seq->sampling);
  again.params.output_before = seq->output_before + seq->n_generated();
  st.resuming[id] = std::move(seq);
  if (!failed.empty()) st.lost_at[id].insert(failed.begin(), failed.end());
  const auto pause = restart_pause(req->second.kv_losses);
  if (pause.count() == 0) {
    if (!begin_restart_lookup(self, again)) queue_first(self, std::move(again));
    return;
  }
  st.pausing.emplace(id, std::move(again));
  self->delayed_send(self, pause, requeue_atom::value, id);
}

void on_requeue(self_ptr self, request_id id) {
  auto& st = self->state;
  auto paused = st.pausing.find(id);
  if (paused == st.pausing.end()) return;  // cancelled meanwhile
  generate_request r = std::move(paused->second);
  st.pausing.erase(paused);
  if (begin_restart_lookup(self, r)) return;
  queue_first(self, std::move(r));
  maybe_step(self);
}

void on_generate(self_ptr self, generate_request& r) {
  auto& st = self->state;
  if (r.params.prompt.empty() || r.params.max_tokens < 0) return refuse(self, r, "empty prompt or negative max tokens");
  if (st.requests.count(r.id) || st.taking_over.count(r.id) ||
      std::any_of(st.waiting.begin(), st.waiting.end(), [&](const auto& w) { return w.id == r.id; }))
    return;  // a duplicate: the first copy answers
  if (st.waiting.size() >= st.config.max_waiting) return refuse(self, r, "too many queued requests");
  if (begin_takeover(self, r) || begin_prefix_lookup(self, r)) return;
  st.waiting.push_back(std::move(r));
  st.waiting_since.push_back(st.views_received);
  maybe_step(self);
}

void on_cancel(self_ptr self, const cancel_request& c) {
  auto& st = self->state;
  if (cancel_takeover(self, c.req_id)) return;
  if (auto paused = st.pausing.find(c.req_id); paused != st.pausing.end()) {
    tell_client(self, paused->second.client, request_finished{c.req_id, "cancelled", {}, 0, {}});
    st.pausing.erase(paused);
    st.lost_at.erase(c.req_id);
    st.requests.erase(c.req_id);
    st.resuming.erase(c.req_id);
    return;
  }
  auto w = std::find_if(st.waiting.begin(), st.waiting.end(), [&](const auto& r) { return r.id == c.req_id; });
  if (w != st.waiting.end()) {
    tell_client(self, w->client, request_finished{c.req_id, "cancelled", {}, 0, {}});
    st.waiting_since.erase(st.waiting_since.begin() + (w - st.waiting.begin()));
    st.waiting.erase(w);
    drop_adopted(self, c.req_id);
    st.requests.erase(c.req_id);  // one that started over
    st.resuming.erase(c.req_id);
    return;
  }
  if (st.batcher->cancel(c.req_id)) maybe_step(self);
}

void on_room_answer(self_ptr self, const room_answer& a) {
  auto& st = self->state;
  if (a.req_id != st.room_asked) return;
  st.room_asked = 0;
  if (a.granted && keep_promised_since(st)) {
    give_up_room(self, a.req_id);
  } else if (a.granted) {
    st.room_granted = a.req_id;
    st.granted_holders = a.holders;
  } else {
    st.rooms_refused = true;
    st.room_too_big = a.req_id;
  }
  maybe_step(self);
}

void on_loan_result(self_ptr self, const loan_result& r) {
  auto& st = self->state;
  st.loan_pending = false;
  if (!r.ok) st.loans_refused = true;
  maybe_step(self);
}

}  // namespace illm::actors::instance_impl
