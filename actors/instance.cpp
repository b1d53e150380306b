#include "actors/instance.hpp"

#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <set>

#include <fmt/format.h>

#include "actors/room_prefill.hpp"
#include "gpu/batcher.hpp"

namespace illm::actors {

namespace {

/// New tokens always go to local blocks; blocks elsewhere are released by the rManager per request.
class local_blocks final : public gpu::block_source {
 public:
  /// `may_take`: whether a sequence may take one more block now (none: whenever one is free).
  local_blocks(std::shared_ptr<gpu::kv_pool> pool, instance_id id,
               std::function<bool(const gpu::sequence&)> may_take = nullptr)
      : pool_(std::move(pool)), id_(id), may_take_(std::move(may_take)) {}
  gpu::result<gpu::block_ref> allocate(const gpu::sequence& seq, uint32_t) override {
    if (may_take_ && !may_take_(seq)) return gpu::status{gpu::status_code::out_of_blocks, "no spare block here"};
    auto block = pool_->allocate({seq.id, id_});
    if (!block.is_ok()) return block.error();
    return gpu::block_ref{id_, block.value()};
  }
  gpu::status release(const gpu::block_ref& ref) override {
    return ref.pool == id_ ? pool_->release(ref.block) : gpu::status::ok();
  }

 private:
  std::shared_ptr<gpu::kv_pool> pool_;
  instance_id id_;
  std::function<bool(const gpu::sequence&)> may_take_;
};

/// A request while it runs here.
struct running_request {
  caf::actor client;
  std::shared_ptr<gpu::sequence> seq;
  size_t tokens_sent = 0;  // generated tokens already streamed
  std::vector<request_placement_entry> placement;
  int64_t first_token_ns = 0;
  uint32_t kv_losses = 0;  // times it started over because a holder of its KV failed
};

/// How often a request starts over after holders of its KV failed before it ends with the error.
constexpr uint32_t max_kv_losses = 3;

int64_t now_ns(caf::local_actor* self) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(self->clock().now().time_since_epoch()).count();
}

/// Blocks picked for a move, until it ends.
struct picked_blocks {
  request_id req = 0;
  std::vector<uint32_t> logical, physical;
};

/// A chunk of another instance's request computed here, until its step has ended.
struct hosted_chunk {
  std::shared_ptr<gpu::sequence> seq;
  caf::typed_response_promise<chunk_done> done;  // answers the prefill_chunk
  caf::actor owner;            // the owner's instance, which hears chunk_started
  bool started = false;
  uint32_t blocks = 0;  // that it fills
};

}  // namespace

struct instance_state {
  instance_config config;
  std::unique_ptr<local_blocks> blocks;
  std::unique_ptr<gpu::batcher> batcher;
  std::map<request_id, running_request> requests;
  std::deque<generate_request> waiting;
  std::deque<uint64_t> waiting_since;  // views_received when each waiting request arrived
  uint64_t views_received = 0;
  std::map<move_id, picked_blocks> picks;
  std::set<std::pair<request_id, uint32_t>> moving;  // (request, logical block) being moved
  std::shared_ptr<gpu::step_plan> in_flight;
  std::vector<std::function<void()>> after_step;  // table changes held while a step runs
  cluster_view view;
  bool have_view = false;
  bool loan_pending = false;
  bool loans_refused = false;  // until the next view: the last loan found no room
  request_id room_asked = 0;    // a long request whose room the gManager is asked for
  uint32_t room_keep = 0;        // ... the blocks it keeps here when it has its room (the rest go there)
  request_id room_too_big = 0;  // a request whose room (all but its working set) was refused: it keeps more here
  request_id room_granted = 0;  // ... and has granted: it starts at the next admission
  std::map<request_id, uint32_t> with_room;  // running requests with a room -> blocks they keep here; loans go there
  /// Requests that lost KV with a failed holder and wait in the queue to start over: their sequences, with
  /// the tokens so far (the queue entry's prompt is prompt and answer so far).
  std::map<request_id, std::shared_ptr<gpu::sequence>> resuming;
  bool rooms_refused = false;   // until the next view
  std::vector<std::pair<instance_id, uint32_t>> granted_holders;  // the granted room's holders and their blocks
  std::map<request_id, room_prefill_plan> prefills;  // requests whose room's holders prefill their prompt
  std::map<move_id, request_id> chunk_requests;       // their chunks under way, to their request
  std::map<move_id, hosted_chunk> hosted_chunks;      // other instances' chunks computed here
  uint64_t next_chunk = 1;
  static inline const char* name = "instance";
};

namespace {

using self_ptr = caf::stateful_actor<instance_state>*;

std::vector<request_placement_entry> placement_of(const gpu::sequence& seq, instance_id self_id) {
  std::map<uint32_t, uint32_t> per_pool;
  for (const gpu::block_ref& ref : seq.table) ++per_pool[ref.pool];
  std::vector<request_placement_entry> out;
  for (const auto& [pool, n] : per_pool) out.push_back({seq.id, pool, n, pool == self_id});
  return out;
}

/// Blocks a request needs for its prompt and all its tokens.
uint32_t blocks_needed(size_t prompt, int32_t max_tokens) { return gpu::blocks_for_tokens(int64_t(prompt) + max_tokens); }

/// The fewest blocks a request with a room keeps here: two prefill chunks (or half the pool when chunks are
/// that large), for its newest blocks. It keeps what fits here when it starts, at least this; the rest of
/// it lives in its room.
uint32_t working_set(const instance_state& st) {
  return std::min(2 * gpu::blocks_for_tokens(st.config.max_batch_tokens), st.config.pool->total_blocks() / 2);
}

/// Blocks of `seq` in this instance's pool.
uint32_t blocks_here(const instance_state& st, const gpu::sequence& seq) {
  return uint32_t(std::count_if(seq.table.begin(), seq.table.end(),
                                [&](const gpu::block_ref& b) { return b.pool == st.config.id; }));
}

/// Blocks the running sequences will still take here, beyond those they hold: all they will grow, or for
/// a request with a room, what its working set lacks.
uint32_t promised_blocks(const instance_state& st) {
  uint32_t promised = 0;
  for (const auto& s : st.batcher->active()) {
    const int64_t grows = int64_t(blocks_needed(s->tokens.size(), s->max_new_tokens - s->n_generated())) -
                          int64_t(s->table.size());
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

/// Blocks the head of the queue keeps here when the room granted to it starts it (0: it has no room yet).
uint32_t granted_keep(const instance_state& st) {
  return !st.waiting.empty() && st.room_granted == st.waiting.front().id ? st.room_keep : 0;
}

/// Tells the rManager, through the shared promises, what the running requests will still take here (before
/// blocks that become theirs are freed: it lends only what is not promised), what the request first in
/// the queue needs (lent away, those blocks would leave this GPU idle while others' KV fills its pool), and
/// what a head whose room is granted keeps here: were those blocks promised to a later room, it would wait
/// for that room's request while that request waited for it.
void note_promised(const instance_state& st) {
  if (!st.config.promises) return;
  st.config.promises->set_running(promised_blocks(st));
  st.config.promises->set_kept(granted_keep(st));
  const generate_request* head = st.waiting.empty() ? nullptr : &st.waiting.front();
  const uint32_t need = head ? blocks_needed(head->prompt.size(), head->max_tokens) : 0;
  st.config.promises->set_queued(need <= st.config.pool->total_blocks() ? need : 0);
}

void publish_placement(self_ptr self) {
  auto& st = self->state;
  note_promised(st);
  placement_update update;
  for (const auto& s : st.batcher->active())
    if (!s->foreign())  // a chunk's blocks are its owner's to report
      for (const auto& e : placement_of(*s, st.config.id)) update.placement.push_back(e);
  update.batch_size = uint32_t(st.batcher->active().size());
  update.waiting = uint32_t(st.waiting.size());
  for (const auto& r : st.waiting) update.waiting_blocks += blocks_needed(r.prompt.size(), r.max_tokens);
  update.promised_blocks = promised_blocks(st);
  if (auto* m = st.config.metrics.get()) {
    const metrics::label_values instance{std::to_string(st.config.id)};
    m->requests_running.with(instance).set(update.batch_size);
    m->requests_waiting.with(instance).set(update.waiting);
  }
  self->send(st.config.rmanager, std::move(update));
}

/// Whether another instance has blocks this one may move into.
bool others_have_free(const instance_state& st) {
  return std::any_of(st.view.instances.begin(), st.view.instances.end(), [&](const instance_view& i) {
    return i.inst_id != st.config.id && !i.draining && i.movable_into() > 0;
  });
}

/// Request `req` no longer holds blocks here as it did (it ended, or starts over): the rManager releases
/// its blocks elsewhere and its room (and gives its chunks' reservations back), and its moves and room
/// prefill under way are forgotten.
void release_elsewhere(self_ptr self, request_id req) {
  auto& st = self->state;
  self->send(st.config.rmanager, request_released{req});
  st.with_room.erase(req);
  if (auto p = st.prefills.find(req); p != st.prefills.end()) {
    for (move_id id : p->second.under_way()) st.chunk_requests.erase(id);
    st.prefills.erase(p);
  }
  for (auto m = st.moving.begin(); m != st.moving.end();) m = m->first == req ? st.moving.erase(m) : std::next(m);
  for (auto p = st.picks.begin(); p != st.picks.end();) p = p->second.req == req ? st.picks.erase(p) : std::next(p);
}

/// Tells the clients of finished sequences and releases their blocks elsewhere.
void finish_hosted_chunk(self_ptr self, const gpu::sequence& seq);

void notify_finished(self_ptr self) {
  auto& st = self->state;
  for (const auto& seq : st.batcher->take_finished()) {
    if (seq->foreign()) {
      finish_hosted_chunk(self, *seq);
      continue;
    }
    auto it = st.requests.find(seq->id);
    if (it == st.requests.end()) continue;
    if (st.config.stream_tokens)
      for (int32_t i = int32_t(it->second.tokens_sent); i < seq->n_generated(); ++i)
        self->send(it->second.client, token_event{seq->id, seq->tokens[size_t(seq->n_prompt + i)]});
    self->send(it->second.client,
               request_finished{seq->id, gpu::to_string(seq->finish), seq->error, seq->preemptions,
                                it->second.placement, seq->n_generated(), it->second.first_token_ns, now_ns(self)});
    release_elsewhere(self, seq->id);
    st.requests.erase(it);
  }
}

void refuse(self_ptr self, const generate_request& r, std::string why) {
  self->send(r.client, request_finished{r.id, "error", std::move(why), 0, {}});
}

/// Asks the rManager to lend `blocks` of this instance's KV to others (its plan_loan picks whose blocks go
/// where), unless a loan is pending or the last one found no room.
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

/// Blocks a request needs in all, and the cluster's or (without lending) the pool's capacity.
uint32_t capacity_for(const instance_state& st) {
  if (!st.have_view || !st.config.lending) return st.config.pool->total_blocks();
  uint32_t capacity = 0;
  for (const auto& i : st.view.instances) capacity += i.total_blocks;
  return capacity;
}

/// Asks for room elsewhere for a request longer than the pool that keeps `keep` of its `need` blocks here
/// (once; again after a refusal and a view).
void ask_room(self_ptr self, request_id req, uint32_t need, uint32_t keep) {
  auto& st = self->state;
  if (st.room_asked || st.rooms_refused) return;
  st.room_asked = req;
  st.room_keep = keep;
  self->send(st.config.rmanager, reserve_room{st.config.id, req, need - keep});
}

/// Whether `seq` may take one more block of this pool: a request with a room takes those it keeps here,
/// beyond them only spare ones (spoken for by no running request, promised to no room). Else it could take
/// blocks promised to another's room, and wait for its own room while that room waited for it.
bool may_take_block(const instance_state& st, const gpu::sequence& seq) {
  const auto room = st.with_room.find(seq.id);
  if (room == st.with_room.end()) return true;
  if (blocks_here(st, seq) < room->second) return true;
  const uint32_t free = st.config.pool->free_blocks(), rooms = st.config.promises ? st.config.promises->rooms_total() : 0;
  return free > uint64_t(promised_blocks(st)) + rooms;
}

/// Blocks the gManager has this instance keep free for a long request waiting for room (latest view).
uint32_t held_for_room(const instance_state& st) {
  for (const auto& i : st.view.instances)
    if (i.inst_id == st.config.id) return i.held_for_room;
  return 0;
}

enum class verdict { admit, wait, refuse };

/// Free blocks a new request needing `need` blocks may take here, `promised` being spoken for by running
/// requests. Blocks promised to others' rooms stay free until their moves come: a request that fits here
/// whole may use them meanwhile (it ends; the room fills over a long prefill), unless a room already
/// waits for them; other requests (a long one's part here) may not. Blocks held back for a room still
/// waiting are not for new requests either, except the one whose room was granted before it (`granted`).
uint32_t blocks_for_new(const instance_state& st, uint32_t need, uint32_t promised, bool granted = false) {
  const uint32_t available = st.config.pool->free_blocks();
  const uint32_t held = granted ? 0 : held_for_room(st);
  const uint32_t unpromised = available - std::min(available, promised + held);
  const auto* rooms = st.config.promises.get();
  if (!rooms || (need <= st.config.pool->total_blocks() && !rooms->overdrawn())) return unpromised;
  return unpromised - std::min(unpromised, rooms->rooms_total());
}

/// Whether the request at the head of the queue starts now. Without lending it needs room for all its
/// tokens in this pool (blocks free, not promised to running requests); when it does not fit but others
/// have room, a loan moves blocks of running requests out, and it starts once they have. A request longer
/// than the pool needs a room: blocks the gManager keeps for it elsewhere, where its blocks move as it
/// grows; so does one that does not fit what is free while nothing runs here. Refused: without lending, a
/// request longer than the pool; with it, one longer than the cluster (as a view newer than the request
/// shows: members may have joined).
verdict judge(self_ptr self, uint32_t need, uint32_t promised) {
  auto& st = self->state;
  const generate_request& r = st.waiting.front();
  const uint32_t capacity = capacity_for(st);
  if (need > capacity) return !st.config.lending || st.views_received > st.waiting_since.front() ? verdict::refuse
                                                                                                  : verdict::wait;
  const uint32_t fits_here = blocks_for_new(st, need, promised, st.room_granted == r.id);
  if (need <= fits_here) return verdict::admit;
  if (st.config.lending && need > st.config.pool->total_blocks()) {
    // It keeps its working set here and the rest in a room, where its full blocks go as it grows; when the
    // others cannot hold that much, it keeps what fits here and asks a smaller room. A room granted while
    // blocks here went to others waits for them.
    if (fits_here < working_set(st)) return verdict::wait;
    if (st.room_granted == r.id) return fits_here >= st.room_keep ? verdict::admit : verdict::wait;
    ask_room(self, r.id, need, st.room_too_big == r.id ? std::min(fits_here, need - 1) : working_set(st));
    return verdict::wait;
  }
  // Nothing runs here whose end would free blocks (the pool holds others' KV): it keeps what fits here and
  // asks a room for the rest, rather than wait for requests elsewhere to end.
  if (st.config.lending && st.batcher->idle() && fits_here >= working_set(st)) {
    if (st.room_granted == r.id) return fits_here >= st.room_keep ? verdict::admit : verdict::wait;
    ask_room(self, r.id, need, fits_here);
    return verdict::wait;
  }
  // Make room by lending running requests' blocks, unless the pool is a long request's (or nothing runs and
  // less than a working set is free: then it waits for blocks held for others to go).
  if (!st.batcher->idle() && st.with_room.empty()) ask_loan(self, 0, need - fits_here);
  return verdict::wait;
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

void begin_room_prefill(self_ptr self, request_id req);

/// Puts the waiting request at `index` of the queue into the batch.
void start_waiting(self_ptr self, size_t index) {
  auto& st = self->state;
  const generate_request& r = st.waiting[index];
  if (auto resumed = st.resuming.find(r.id); resumed != st.resuming.end()) {
    st.batcher->add(std::move(resumed->second));  // its running_request (tokens streamed so far) stays
    st.resuming.erase(resumed);
  } else {
    auto seq = std::make_shared<gpu::sequence>();
    seq->id = r.id;
    seq->tokens = r.prompt;
    seq->n_prompt = int(r.prompt.size());
    seq->sampling = {r.temperature, r.top_p};
    seq->rng = r.seed;
    seq->max_new_tokens = r.max_tokens;
    seq->ignore_eos = r.ignore_eos;
    st.requests[r.id] = {r.client, seq, 0, {}};
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

/// Blocks the head of the queue, a long request waiting for its room, needs here when it starts.
uint32_t head_keeps(const instance_state& st, uint32_t need) {
  if (need <= st.config.pool->total_blocks()) return 0;
  return st.room_granted == st.waiting.front().id ? st.room_keep : working_set(st);
}

/// Starts requests queued behind a long request that waits for its room: those that fit here whole and
/// leave the blocks it keeps here when its room comes. They end long before a room is free (it waits for
/// blocks all over the cluster), and without them the instance would idle with its pool free.
void backfill(self_ptr self, uint32_t head_need, uint32_t promised) {
  auto& st = self->state;
  const uint32_t keep = head_keeps(st, head_need);
  if (keep == 0) return;
  for (size_t i = 1; i < st.waiting.size() && int(st.batcher->active().size()) < st.config.max_batch_seqs;) {
    const generate_request& r = st.waiting[i];
    const uint32_t need = blocks_needed(r.prompt.size(), r.max_tokens);
    if (need > st.config.pool->total_blocks() || uint64_t(need) + keep > blocks_for_new(st, need, promised)) {
      ++i;
      continue;
    }
    start_waiting(self, i);
    promised = promised_blocks(st);
  }
}

/// Moves waiting requests into the batch, first come first served, while judge() lets them.
void admit(self_ptr self) {
  auto& st = self->state;
  uint32_t promised = promised_blocks(st);
  bool admitted = false;
  while (!st.waiting.empty() && int(st.batcher->active().size()) < st.config.max_batch_seqs) {
    const generate_request& r = st.waiting.front();
    const uint32_t need = blocks_needed(r.prompt.size(), r.max_tokens);
    const verdict v = judge(self, need, promised);
    if (v == verdict::wait) {
      const size_t before = st.waiting.size();
      backfill(self, need, promised);
      admitted = admitted || st.waiting.size() < before;
      break;
    }
    if (v == verdict::refuse) {
      refuse(self, r, fmt::format("the request needs {} KV blocks; the cluster has {}", need, capacity_for(st)));
      st.requests.erase(r.id);  // one that started over
      st.resuming.erase(r.id);
      st.waiting.pop_front();
      st.waiting_since.pop_front();
      continue;
    }
    start_waiting(self, 0);
    promised = promised_blocks(st);
    admitted = true;
  }
  if (admitted) publish_placement(self);  // the rManager lends only blocks not promised: tell it at once
}

void on_step_done(self_ptr self, step_done& done);
void tell_chunks_started(self_ptr self, const gpu::step_plan& plan);

/// Plans and starts the next step unless one is running.
void maybe_step(self_ptr self) {
  auto& st = self->state;
  if (st.in_flight) return;
  admit(self);
  auto plan = std::make_shared<gpu::step_plan>();
  if (gpu::status s = st.batcher->plan(*plan); !s.is_ok()) {
    for (const auto& seq : st.batcher->active()) {
      seq->finish = gpu::finish_reason::error;
      seq->error = s.message();
    }
    (void)st.batcher->plan(*plan);  // retires them
  }
  note_promised(st);  // planning may have preempted a sequence: its blocks are free, and promised to it again
  notify_finished(self);
  if (plan->empty()) {
    publish_placement(self);
    return;
  }
  st.in_flight = plan;
  tell_chunks_started(self, *plan);
  self->request(st.config.worker, caf::infinite, run_step{plan})
      .then([=](step_done& done) { on_step_done(self, done); },
            [=](const caf::error& err) {
              step_done failed{plan, "the worker failed: " + self->system().render(err)};
              on_step_done(self, failed);
            });
}

/// Request `id` lost KV with a failed holder (`why`): it starts over from its tokens (prompt and answer so
/// far, the sampling state kept, so the answer goes on as it would have), first in the queue but behind a
/// head whose room is under way, once its blocks elsewhere and its room are released. One that lost KV
/// more than max_kv_losses times ends with the error.
void start_over(self_ptr self, request_id id, const std::string& why) {
  auto& st = self->state;
  auto req = st.requests.find(id);
  if (req == st.requests.end() || req->second.seq->finished()) return;
  gpu::sequence& running = *req->second.seq;
  if (++req->second.kv_losses > max_kv_losses) {
    running.finish = gpu::finish_reason::error;  // retired and reported at the next plan
    running.error = fmt::format("{} (its KV was lost {} times)", why, req->second.kv_losses);
    return;
  }
  std::shared_ptr<gpu::sequence> seq = st.batcher->take_back(id);
  if (!seq) return;
  release_elsewhere(self, id);
  if (auto* m = st.config.metrics.get()) m->requests_restarted.with({std::to_string(st.config.id)}).add();
  const bool head_has_room = !st.waiting.empty() && (st.room_asked == st.waiting.front().id ||
                                                     st.room_granted == st.waiting.front().id);
  const auto at = head_has_room ? 1 : 0;
  const int32_t left = seq->max_new_tokens - seq->n_generated();
  st.waiting.insert(st.waiting.begin() + at, generate_request{id, seq->tokens, left, seq->sampling.temperature,
                                                              seq->sampling.top_p, seq->rng, seq->ignore_eos,
                                                              req->second.client});
  st.waiting_since.insert(st.waiting_since.begin() + at, st.views_received);
  st.resuming[id] = std::move(seq);
}

/// Streams the tokens a completed step gave its sequences (only the first one, without streaming).
void send_new_tokens(self_ptr self, const gpu::step_plan& plan) {
  auto& st = self->state;
  for (gpu::sequence* s : plan.sequences) {
    auto it = st.requests.find(s->id);
    if (it == st.requests.end()) continue;
    if (!it->second.first_token_ns && s->n_generated() > 0) {
      it->second.first_token_ns = now_ns(self);
      if (!st.config.stream_tokens) self->send(it->second.client, token_event{s->id, s->tokens[size_t(s->n_prompt)]});
    }
    if (s->finished() || !st.config.stream_tokens) continue;
    for (; int32_t(it->second.tokens_sent) < s->n_generated(); ++it->second.tokens_sent)
      self->send(it->second.client,
                 token_event{s->id, s->tokens[size_t(s->n_prompt) + it->second.tokens_sent]});
  }
}

void on_step_done(self_ptr self, step_done& done) {
  auto& st = self->state;
  gpu::step_plan& plan = *done.plan;
  for (gpu::sequence* s : plan.sequences)  // before the batcher frees the finished ones' blocks
    if (auto it = st.requests.find(s->id); it != st.requests.end())
      it->second.placement = placement_of(*s, st.config.id);
  if (!done.error.empty() && std::any_of(plan.sequences.begin(), plan.sequences.end(), [&](const gpu::sequence* s) {
        return std::find(done.failed.begin(), done.failed.end(), s->id) != done.failed.end();
      })) {
    // Holders of some sequences' KV failed: those start over from their tokens, the others run the step again.
    st.batcher->discard(plan);
    for (uint64_t id : done.failed) {
      if (auto chunk = st.hosted_chunks.find(id); chunk != st.hosted_chunks.end()) {
        chunk->second.seq->finish = gpu::finish_reason::error;  // answered when it is retired
        chunk->second.seq->error = done.error;
        continue;
      }
      start_over(self, id, done.error);
    }
  } else {
    if (!done.error.empty()) {
      for (gpu::sequence* s : plan.sequences) {
        s->finish = gpu::finish_reason::error;
        s->error = done.error;
      }
      plan.sampled.assign(plan.params.size(), 0);
    }
    st.batcher->complete(plan);
    send_new_tokens(self, plan);
  }
  st.in_flight = nullptr;
  for (auto& change : std::exchange(st.after_step, {})) change();
  notify_finished(self);
  publish_placement(self);
  maybe_step(self);
}

/// Whether a sequence has a room or blocks on other instances.
bool spread(const instance_state& st, const gpu::sequence& seq) {
  return st.with_room.count(seq.id) ||
         std::any_of(seq.table.begin(), seq.table.end(), [&](const gpu::block_ref& b) { return b.pool != st.config.id; });
}

gpu::batcher_options batch_options(self_ptr self) {
  gpu::batcher_options o;
  o.max_batch_tokens = self->state.config.max_batch_tokens;
  o.max_batch_seqs = self->state.config.max_batch_seqs;
  o.mixed_step_tokens = self->state.config.mixed_step_tokens;
  o.on_shortage = [self](const gpu::sequence& seq, uint32_t short_by) {
    auto& st = self->state;
    if (ask_loan(self, seq.id, short_by)) return gpu::shortage_action::wait;
    // No loan now: the batcher would recompute the newest other sequence holding blocks. With lending,
    // wait instead when there is none, or when it is spread over other instances (recomputing it would
    // throw away KV that took loans to build): blocks come back as requests end.
    if (!st.config.lending) return gpu::shortage_action::preempt;
    if (st.with_room.count(seq.id)) return gpu::shortage_action::wait;  // its room's blocks come as others end
    auto victim = std::find_if(st.batcher->active().rbegin(), st.batcher->active().rend(), [&](const auto& s) {
      return s.get() != &seq && !s->finished() && !s->table.empty() && !s->held && !s->foreign();
    });
    if (victim == st.batcher->active().rend() || spread(st, **victim)) return gpu::shortage_action::wait;
    return gpu::shortage_action::preempt;
  };
  return o;
}

/// Chooses up to max full local blocks to move, oldest first, from req (or the longest request).
block_pick pick(self_ptr self, const pick_blocks& ask) {
  auto& st = self->state;
  auto candidates = [&](const gpu::sequence& s) {
    std::vector<uint32_t> out;
    // A chunk's blocks are its owner's; a request whose prompt its room prefills is read there as it is.
    if (s.foreign() || st.prefills.count(s.id)) return out;
    for (uint32_t i = 0; i < s.full_blocks() && i < s.table.size() && out.size() < ask.max_blocks; ++i)
      if (s.table[i].pool == st.config.id && !st.moving.count({s.id, i})) out.push_back(i);
    return out;
  };
  const gpu::sequence* chosen = nullptr;
  if (auto it = st.requests.find(ask.req_id); it != st.requests.end() && !it->second.seq->finished() &&
                                              !candidates(*it->second.seq).empty())
    chosen = it->second.seq.get();
  for (const auto& s : st.batcher->active()) {  // else the request with the most movable blocks
    if (ask.only_this || (chosen && chosen->id == ask.req_id)) break;
    if (!s->finished() && (!chosen || candidates(*s).size() > candidates(*chosen).size())) chosen = s.get();
  }
  block_pick out{ask.id, chosen ? chosen->id : ask.req_id, {}, {}};
  if (!chosen) return out;
  for (uint32_t i : candidates(*chosen)) {
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
    for (uint32_t b : pick_it->second.physical) (void)st.config.pool->release(b);
  }
  unmark(self, m.id);
  return ok;
}

// ---- room prefill, at the owner: the prompt's chunks handed to the room's holders --------------------------

/// Tokens of a room's chunk: a step's, less a decode token for every sequence a step may hold (at least half
/// a step), so that a holder runs one whole beside its own decode tokens.
int32_t chunk_tokens(const instance_state& st) {
  const int32_t b = gpu::kv_block_tokens, step = st.config.max_batch_tokens;
  return std::max(b, std::max(step - st.config.max_batch_seqs, step / 2) / b * b);
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
  st.prefills.erase(it);
  if (auto r = st.requests.find(req); r != st.requests.end()) r->second.seq->held = false;
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
  seq.n_cached = it->second.covered();
  seq.table.resize(gpu::blocks_for_tokens(seq.n_cached));
  seq.held = false;
  st.prefills.erase(it);
  publish_placement(self);
  maybe_step(self);
}

/// Starts `req`'s room prefill (its room is granted) when enough of its prompt would go to the holders.
void begin_room_prefill(self_ptr self, request_id req) {
  auto& st = self->state;
  auto r = st.requests.find(req);
  if (r == st.requests.end() || st.config.room_prefill_min_chunks <= 0) return;
  gpu::sequence& seq = *r->second.seq;
  if (size_t(seq.n_cached) != seq.table.size() * gpu::kv_block_tokens) return;
  auto plan = room_prefill_plan::make(seq.n_cached, int32_t(seq.tokens.size()), chunk_tokens(st), st.granted_holders,
                                      st.config.room_prefill_min_chunks);
  if (!plan) return;
  seq.held = true;
  st.prefills.insert_or_assign(req, std::move(*plan));
  hand_out_chunk(self, req);
}

/// A chunk's blocks are reserved at its holder (or not): hand it over with the table up to its end.
void on_chunk_reserved(self_ptr self, request_id req, move_id id, const move_reservation& reservation);

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

void on_chunk_done(self_ptr self, request_id req, move_id id, const chunk_done& done);

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
  prefill_chunk chunk{id, st.config.id, req, c.pos0, {}, {}, {}};
  chunk.tokens.assign(seq->tokens.begin() + c.pos0, seq->tokens.begin() + c.end);
  for (size_t b = 0; b < size_t(c.end / gpu::kv_block_tokens); ++b) {
    chunk.table_pools.push_back(seq->table[b].pool);
    chunk.table_blocks.push_back(seq->table[b].block);
  }
  publish_placement(self);
  self->request(holder->instance, caf::infinite, std::move(chunk))
      .then([=](const chunk_done& d) { on_chunk_done(self, req, id, d); },
            [=](const caf::error& e) { on_chunk_done(self, req, id, chunk_done{id, false, self->system().render(e)}); });
}

/// The holder started the step computing chunk `id`: the next chunk may go.
void on_chunk_started(self_ptr self, move_id id) {
  auto& st = self->state;
  auto req = st.chunk_requests.find(id);
  if (req == st.chunk_requests.end()) return;
  const request_id r = req->second;
  if (auto it = st.prefills.find(r); it != st.prefills.end()) it->second.started(id);
  hand_out_chunk(self, r);
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

void on_chunk_done(self_ptr self, request_id req, move_id id, const chunk_done& done) {
  auto& st = self->state;
  const auto found = find_chunk(st, req, id);
  if (!found) return;  // given up meanwhile
  const room_prefill_plan::chunk& c = found->chunk;
  if (!done.ok && !found->plan->has_started(id)) return turn_down_chunk(self, *found, req, id);
  if (!done.ok)
    return abandon_room_prefill(self, req, fmt::format("a chunk of its prompt at instance {} failed: {}", c.holder,
                                                       done.error));
  commit_chunk commit{id, req, {}};
  for (int32_t b = c.pos0 / gpu::kv_block_tokens; b < c.end / gpu::kv_block_tokens; ++b)
    commit.logical.push_back(uint32_t(b));
  self->request(st.config.rmanager, caf::infinite, std::move(commit))
      .then(
          [=](bool committed) {
            auto& st = self->state;
            const auto now = find_chunk(st, req, id);
            if (!now) return;
            if (!committed) return abandon_room_prefill(self, req, "its holder did not commit a chunk of its prompt");
            now->plan->committed(id);
            st.chunk_requests.erase(id);
            hand_out_chunk(self, req);
          },
          [=](const caf::error& e) { abandon_room_prefill(self, req, "no commit: " + self->system().render(e)); });
}

/// Room prefills whose chunk went to an instance that left the view start over.
void check_prefill_holders(self_ptr self) {
  auto& st = self->state;
  std::vector<std::pair<request_id, instance_id>> lost;
  for (const auto& [req, plan] : st.prefills)
    for (move_id id : plan.under_way())
      if (!st.view.has_member(plan.holder_of(id))) lost.emplace_back(req, plan.holder_of(id));
  for (const auto& [req, holder] : lost)
    abandon_room_prefill(self, req, fmt::format("instance {}, prefilling a chunk of its prompt, is gone", holder));
}

// ---- room prefill, at a holder: other instances' chunks computed here ------------------------------------

/// Why chunk `c` cannot be computed here (empty: it can): its positions, block table and size must fit.
std::string chunk_refusal(const instance_state& st, const prefill_chunk& c) {
  const int64_t b = gpu::kv_block_tokens, end = int64_t(c.pos0) + int64_t(c.tokens.size());
  if (c.tokens.empty() || c.pos0 < 0 || c.pos0 % b != 0 || end % b != 0 || c.owner == st.config.id)
    return "a chunk must cover whole blocks of another instance's request";
  if (int64_t(c.tokens.size()) > st.config.max_batch_tokens)
    return fmt::format("a chunk of {} tokens exceeds this instance's {} per step", c.tokens.size(),
                       st.config.max_batch_tokens);
  if (c.table_pools.size() != size_t(end / b) || c.table_blocks.size() != c.table_pools.size())
    return "the chunk's block table does not cover its positions";
  for (int32_t t : c.tokens)
    if (t < 0) return "the chunk has a negative token id";
  return {};
}

/// Starts computing chunk `c` into `blocks` (its reservation here), if they are the chunk's own blocks.
void start_hosted_chunk(self_ptr self, const prefill_chunk& c, const std::vector<uint32_t>& blocks,
                        caf::typed_response_promise<chunk_done> done, caf::actor owner) {
  auto& st = self->state;
  const size_t first = size_t(c.pos0 / gpu::kv_block_tokens);
  bool matches = !blocks.empty() && first + blocks.size() == c.table_blocks.size();
  for (size_t i = 0; matches && i < blocks.size(); ++i)
    matches = c.table_pools[first + i] == st.config.id && c.table_blocks[first + i] == blocks[i];
  if (!matches) {
    if (!blocks.empty()) self->send(st.config.rmanager, return_reservation{c.id});
    done.deliver(chunk_done{c.id, false, fmt::format("instance {} has no reservation {} for these blocks of "
                                                     "request {}", st.config.id, c.id, c.req_id)});
    return;
  }
  auto seq = std::make_shared<gpu::sequence>();
  seq->id = c.id;
  seq->foreign_request = c.req_id;
  seq->foreign_owner = c.owner;
  seq->tokens.assign(size_t(c.pos0), 0);  // placeholders: those positions' KV is elsewhere
  seq->tokens.insert(seq->tokens.end(), c.tokens.begin(), c.tokens.end());
  seq->n_prompt = int(seq->tokens.size());
  seq->n_cached = c.pos0;
  for (size_t i = 0; i < c.table_pools.size(); ++i) seq->table.push_back({c.table_pools[i], c.table_blocks[i]});
  st.hosted_chunks[c.id] = {seq, std::move(done), std::move(owner), false, uint32_t(blocks.size())};
  st.batcher->add(std::move(seq));
  maybe_step(self);
}

/// A chunk of another instance's request, from its owner: computed here into its reserved blocks.
caf::result<chunk_done> accept_chunk(self_ptr self, prefill_chunk& c) {
  auto& st = self->state;
  if (std::string why = chunk_refusal(st, c); !why.empty()) return chunk_done{c.id, false, std::move(why)};
  if (st.hosted_chunks.count(c.id)) return chunk_done{c.id, false, "that chunk is already being computed here"};
  caf::actor owner = caf::actor_cast<caf::actor>(self->current_sender());  // before the promise takes it
  auto done = self->make_response_promise<chunk_done>();
  auto chunk = std::make_shared<prefill_chunk>(std::move(c));
  self->request(st.config.rmanager, caf::infinite, take_reservation{chunk->id, chunk->owner, chunk->req_id})
      .then([=](const std::vector<uint32_t>& blocks) mutable { start_hosted_chunk(self, *chunk, blocks, done, owner); },
            [=](const caf::error& e) mutable {
              done.deliver(chunk_done{chunk->id, false, "no reservation: " + self->system().render(e)});
            });
  return done;
}

/// Tells the owners of the chunks in `plan` that their step started (once each).
void tell_chunks_started(self_ptr self, const gpu::step_plan& plan) {
  for (const gpu::sequence* s : plan.sequences) {
    auto it = s->foreign() ? self->state.hosted_chunks.find(s->id) : self->state.hosted_chunks.end();
    if (it == self->state.hosted_chunks.end() || it->second.started) continue;
    it->second.started = true;
    self->send(it->second.owner, chunk_started{s->id});
  }
}

/// A chunk computed here ended (written, failed or cancelled): its owner hears it, and its reservation goes
/// back to the rManager, which waits for the owner's commit.
void finish_hosted_chunk(self_ptr self, const gpu::sequence& seq) {
  auto& st = self->state;
  auto it = st.hosted_chunks.find(seq.id);
  if (it == st.hosted_chunks.end()) return;
  const bool ok = seq.finish == gpu::finish_reason::length;
  const std::string why = seq.finish == gpu::finish_reason::cancelled ? "cancelled" : seq.error;
  if (auto* m = st.config.metrics.get(); m && ok)
    m->blocks_prefilled.with({std::to_string(st.config.id)}).add(double(it->second.blocks));
  it->second.done.deliver(chunk_done{seq.id, ok, ok ? "" : why});
  self->send(st.config.rmanager, return_reservation{seq.id});
  st.hosted_chunks.erase(it);
}

}  // namespace

caf::behavior instance_behavior(self_ptr self, instance_config config) {
  auto& st = self->state;
  st.config = std::move(config);
  st.blocks = std::make_unique<local_blocks>(st.config.pool, st.config.id,
                                             [self](const gpu::sequence& seq) { return may_take_block(self->state, seq); });
  st.batcher = std::make_unique<gpu::batcher>(*st.blocks, batch_options(self));
  return {
      [=](generate_request& r) {
        auto& st = self->state;
        if (r.prompt.empty() || r.max_tokens < 0) return refuse(self, r, "empty prompt or negative max tokens");
        if (st.requests.count(r.id) ||
            std::any_of(st.waiting.begin(), st.waiting.end(), [&](const auto& w) { return w.id == r.id; }))
          return;  // a duplicate: the first copy answers
        if (st.waiting.size() >= st.config.max_waiting) return refuse(self, r, "too many queued requests");
        st.waiting.push_back(std::move(r));
        st.waiting_since.push_back(st.views_received);
        maybe_step(self);
      },
      [=](const cancel_request& c) {
        auto& st = self->state;
        auto w = std::find_if(st.waiting.begin(), st.waiting.end(), [&](const auto& r) { return r.id == c.req_id; });
        if (w != st.waiting.end()) {
          self->send(w->client, request_finished{c.req_id, "cancelled", {}, 0, {}});
          st.waiting_since.erase(st.waiting_since.begin() + (w - st.waiting.begin()));
          st.waiting.erase(w);
          st.requests.erase(c.req_id);  // one that started over
          st.resuming.erase(c.req_id);
          return;
        }
        if (st.batcher->cancel(c.req_id)) maybe_step(self);
      },
      [=](cluster_view& v) {
        auto& st = self->state;
        st.view = std::move(v);
        st.have_view = true;
        ++st.views_received;
        st.loans_refused = false;
        st.rooms_refused = false;
        check_prefill_holders(self);
        maybe_step(self);
      },
      [=](const room_answer& a) {
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
      },
      [=](const loan_result& r) {
        auto& st = self->state;
        st.loan_pending = false;
        if (!r.ok) st.loans_refused = true;
        maybe_step(self);
      },
      [=](const pick_blocks& ask) { return pick(self, ask); },
      [=](const blocks_moved& m) -> caf::result<bool> {
        auto& st = self->state;
        if (!st.in_flight) {
          const bool ok = switch_blocks(self, m);
          maybe_step(self);
          return ok;
        }
        auto promise = self->make_response_promise<bool>();
        st.after_step.push_back([=]() mutable { promise.deliver(switch_blocks(self, m)); });
        return promise;
      },
      [=](const move_abandoned& m) { unmark(self, m.id); },
      [=](prefill_chunk& c) { return accept_chunk(self, c); },
      [=](const chunk_started& c) { on_chunk_started(self, c.id); },
      [=](const cancel_chunk& c) {
        auto& st = self->state;
        if (auto it = st.hosted_chunks.find(c.id); it != st.hosted_chunks.end() && st.batcher->cancel(c.id))
          maybe_step(self);
      },
      [=](caf::get_atom) {  // for reports: requests running and waiting
        return std::make_pair(uint32_t(self->state.batcher->active().size()), uint32_t(self->state.waiting.size()));
      },
  };
}

caf::actor spawn_instance(caf::actor_system& sys, instance_config config) {
  return sys.spawn(instance_behavior, std::move(config));
}

}  // namespace illm::actors
