// The instance's step loop: plans the next step of continuous batching after admitting what may start,
// runs it on the worker (run_step -> step_done), retires finished sequences and tells their clients, sends the
// next step, and streams the tokens the last one gave while the next one runs. A step whose remote attention failed for some sequences starts those over and runs
// again for the others. A new cluster view may let waiting requests start.
#include <algorithm>
#include <map>
#include <set>

#include "actors/instance/state.hpp"

namespace illm::actors::instance_impl {

namespace {

/// `lp` of `token` as a message carries it: the token's own, then the alternatives'.
void append_logprobs(int32_t token, const gpu::token_logprobs& lp, std::vector<token_logprob>& out) {
  out.push_back({token, lp.logprob});
  for (size_t k = 0; k < lp.top_ids.size(); ++k) out.push_back({lp.top_ids[k], lp.top_logprobs[k]});
}

/// The i-th generated token of `s` as its client hears of it, with its log probabilities when asked (and the
/// prompt's with the first).
token_event token_event_of(const gpu::sequence& s, int i) {
  token_event e{s.id, s.tokens[size_t(s.n_prompt + i)]};
  if (size_t(i) < s.logprobs.size()) append_logprobs(e.token, s.logprobs[size_t(i)], e.logprobs);
  if (i == 0 && s.prompt_logprobs >= 0)
    for (int p = 1; p < s.n_prompt; ++p)
      append_logprobs(s.tokens[size_t(p)], size_t(p) < s.prompt_scores.size() ? s.prompt_scores[size_t(p)]
                                                                               : gpu::token_logprobs{},
                      e.prompt_logprobs);
  return e;
}

/// Tells the clients of finished sequences and releases their blocks elsewhere.
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
        tell_client(self, it->second.client, token_event_of(*seq, i));
    request_finished end{seq->id, gpu::to_string(seq->finish), seq->error, seq->preemptions, it->second.placement,
                         seq->n_generated(), it->second.first_token_ns, now_ns(self)};
    end.replicas = replica_placement(it->second);
    end.cached_tokens = seq->cached_prompt_tokens;
    tell_client(self, it->second.client, std::move(end));
    release_elsewhere(self, seq->id, std::move(seq->keyed_elsewhere));
    st.requests.erase(it);
  }
}

/// The first-token bookkeeping of the tokens a completed step gave its sequences (and, without streaming, the
/// first token sent); returns the requests whose new tokens stream_tokens sends once the next step is under way.
std::vector<request_id> note_new_tokens(self_ptr self, const gpu::step_plan& plan) {
  auto& st = self->state;
  std::vector<request_id> to_stream;
  for (gpu::sequence* s : plan.sequences) {
    auto it = st.requests.find(s->id);
    if (it == st.requests.end()) continue;
    note_recovered_token(self, it->second, *s);
    if (!it->second.first_token_ns && s->n_generated() > 0) {
      it->second.first_token_ns = now_ns(self);
      if (!st.config.stream_tokens) tell_client(self, it->second.client, token_event_of(*s, 0));
    }
    if (st.config.stream_tokens && !s->finished() && int32_t(it->second.tokens_sent) < s->n_generated())
      to_stream.push_back(s->id);
  }
  return to_stream;
}

/// Streams the tokens of `ids` not sent yet. A request that ended meanwhile had them sent with its end
/// (notify_finished), so it is no longer among the running ones.
void stream_tokens(self_ptr self, const std::vector<request_id>& ids) {
  auto& st = self->state;
  for (request_id id : ids) {
    auto it = st.requests.find(id);
    if (it == st.requests.end()) continue;
    const gpu::sequence& s = *it->second.seq;
    for (; int32_t(it->second.tokens_sent) < s.n_generated(); ++it->second.tokens_sent)
      tell_client(self, it->second.client, token_event_of(s, int(it->second.tokens_sent)));
  }
}

/// Holders of some sequences' KV failed: those recover from their replicas where every lost block has one, or
/// else start over from their tokens (a chunk computed for another instance fails); the others run the step again.
void retry_without_failed(self_ptr self, const step_done& done) {
  auto& st = self->state;
  st.batcher->discard(*done.plan);
  std::map<uint64_t, std::set<instance_id>> lost;  // per sequence, the holders its attention failed at
  for (const gpu::failed_attention& f : done.failed) lost[f.seq].insert(instance_id(f.holder));
  for (const auto& [id, holders] : lost) {
    if (auto chunk = st.hosted_chunks.find(id); chunk != st.hosted_chunks.end()) {
      chunk->second.seq->finish = gpu::finish_reason::error;  // answered when it is retired
      chunk->second.seq->error = done.error;
      continue;
    }
    note_kv_lost(self, id);
    if (!recover_from_replicas(self, id, holders)) start_over(self, id, done.error, holders);
  }
}

/// Whether the step's error is due to some of its sequences (their remote attention failed).
bool failed_for_some(const step_done& done) {
  const auto& seqs = done.plan->sequences;
  return !done.error.empty() && std::any_of(seqs.begin(), seqs.end(), [&](const gpu::sequence* s) {
           return std::any_of(done.failed.begin(), done.failed.end(), [&](const auto& f) { return f.seq == s->id; });
         });
}

void on_step_done(self_ptr self, step_done& done) {
  auto& st = self->state;
  gpu::step_plan& plan = *done.plan;
  for (gpu::sequence* s : plan.sequences)  // before the batcher frees the finished ones' blocks
    if (auto it = st.requests.find(s->id); it != st.requests.end())
      it->second.placement = placement_of(*s, st.config.id);
  std::vector<request_id> to_stream;
  if (failed_for_some(done)) {
    retry_without_failed(self, done);
  } else {
    if (!done.error.empty()) {
      for (gpu::sequence* s : plan.sequences) {
        s->finish = gpu::finish_reason::error;
        s->error = done.error;
      }
      plan.sampled.assign(plan.params.size(), 0);
    }
    st.batcher->complete(plan);
    note_recomputed(self, st.batcher->last_step_recomputed());
    to_stream = note_new_tokens(self, plan);
  }
  st.in_flight = nullptr;
  for (auto& change : std::exchange(st.after_step, {})) change();
  notify_finished(self);
  // The next step goes to the worker first: streaming this step's tokens and reporting the placement overlap it.
  maybe_step(self);
  stream_tokens(self, to_stream);
  publish_placement(self);
}

/// Whether a sequence has a room or blocks on other instances.
bool spread(const instance_state& st, const gpu::sequence& seq) {
  return st.with_room.count(seq.id) ||
         std::any_of(seq.table.begin(), seq.table.end(), [&](const gpu::block_ref& b) { return b.pool != st.config.id; });
}

/// No loan now: the batcher would recompute the newest other sequence holding blocks. With lending, wait
/// instead when there is none, or when it is spread over other instances (recomputing it would throw away KV
/// that took loans to build): blocks come back as requests end.
gpu::shortage_action on_shortage(self_ptr self, const gpu::sequence& seq, uint32_t short_by) {
  auto& st = self->state;
  if (ask_loan(self, seq.id, short_by)) return gpu::shortage_action::wait;
  if (!st.config.lending) return gpu::shortage_action::preempt;
  if (st.with_room.count(seq.id)) return gpu::shortage_action::wait;  // its room's blocks come as others end
  auto victim = std::find_if(st.batcher->active().rbegin(), st.batcher->active().rend(), [&](const auto& s) {
    return s.get() != &seq && !s->finished() && !s->table.empty() && !s->held && !s->foreign();
  });
  if (victim == st.batcher->active().rend() || spread(st, **victim)) return gpu::shortage_action::wait;
  return gpu::shortage_action::preempt;
}

}  // namespace

gpu::batcher_options batch_options(self_ptr self) {
  gpu::batcher_options o;
  o.max_batch_tokens = self->state.config.batch.max_batch_tokens;
  o.max_batch_seqs = self->state.config.batch.max_batch_seqs;
  o.mixed_step_tokens = self->state.config.batch.mixed_step_tokens;
  o.prefill_every_steps = self->state.config.batch.prefill_every_steps;
  o.on_shortage = [self](const gpu::sequence& seq, uint32_t short_by) { return on_shortage(self, seq, short_by); };
  return o;
}

namespace {

/// An idle instance with requests in its queue looks at it again shortly: what they wait for (blocks its
/// rManager frees when others' requests end, a room) may come without a message to the instance, e.g.
/// while no gManager sends views.
void look_again_later(self_ptr self) {
  auto& st = self->state;
  if (st.waiting.empty() || st.look_again_pending) return;
  st.look_again_pending = true;
  self->delayed_send(self, queue_recheck_period, recheck_atom::value);
}

}  // namespace

void on_recheck(self_ptr self) {
  self->state.look_again_pending = false;
  maybe_step(self);
}

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
    look_again_later(self);
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

void on_view(self_ptr self, cluster_view& v) {
  auto& st = self->state;
  st.view = std::move(v);
  st.have_view = true;
  ++st.views_received;
  st.loans_refused = false;
  st.rooms_refused = false;
  forget_departed_replicas(self);
  check_prefill_holders(self);
  maybe_step(self);
}

}  // namespace illm::actors::instance_impl
