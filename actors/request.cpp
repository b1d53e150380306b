#include "actors/request.hpp"

#include <algorithm>
#include <chrono>

#include "actors/cluster/request_router.hpp"
#include "gpu/sampler.hpp"

namespace illm::actors {

struct request_state {
  generate_request request;  ///< as the client gave it
  std::vector<int32_t> tokens;
  request_callbacks callbacks;
  instance_actor instance;
  instance_id serving_id = 0;  ///< its id in the cluster's views
  bool resume_elsewhere = false;
  int32_t resumed = 0;           ///< times it went on on another instance
  int32_t generated_before = 0;  ///< tokens it had when it last went on on another instance
  caf::actor_addr lost;          ///< an instance whose down message came, until a view says where to go on
  bool ended = false;
  static inline const char* name = "request";
};

namespace {

using self_ptr = caf::stateful_actor<request_state>*;

/// How long a request whose instance is down waits for a view that says where to go on.
constexpr auto resume_wait = std::chrono::seconds(10);

void end(self_ptr self, const request_finished& f) {
  auto& st = self->state;
  if (st.ended) return;  // exactly once
  st.ended = true;
  if (st.callbacks.on_finished) st.callbacks.on_finished(f);
  // A monitor lives in the monitored actor until it is removed: left there, each ended request would keep its
  // actor's memory (held by the monitor's weak reference) for as long as its instance runs.
  if (st.instance) self->demonitor(st.instance.address());
  self->quit();
}

/// Ends the request from here (no instance ended it), telling the tap.
void end_here(self_ptr self, const request_finished& f) {
  if (const auto& tap = self->state.callbacks.on_delivery; tap && !self->state.ended)
    tap({f.req_id, delivery::kind::end, delivery::front_end, 0, 0, f.reason});
  end(self, f);
}

void end_with_error(self_ptr self, std::string why) {
  end_here(self, {self->state.request.id, "error", std::move(why), self->state.resumed, {}});
}

/// Hands the request to `target`.
void submit(self_ptr self, serving_instance target, generate_request r) {
  auto& st = self->state;
  if (st.instance) self->demonitor(st.instance.address());  // the instance it leaves
  st.instance = std::move(target.actor);
  st.serving_id = target.id;
  if (const auto& tap = st.callbacks.on_delivery)
    tap({st.request.id, delivery::kind::served_by, target.id, 0, int32_t(st.tokens.size()), {}});
  self->monitor(st.instance);
  self->send(st.instance, std::move(r));
}

/// Its instance left the cluster: the request goes on on the instance of `view` with the most free blocks,
/// as a request of its prompt and the tokens so far for the tokens still to come, with its sampling stream where
/// it was (the answer goes on as it would have). Its new owner takes over the blocks that survived elsewhere.
void resume(self_ptr self, const cluster_view& view) {
  auto& st = self->state;
  const instance_view* target = most_free_instance(view);
  if (!target)
    return end_with_error(self, "the instance serving the request left the cluster, and no other takes requests");
  const int32_t left = st.request.params.max_tokens - int32_t(st.tokens.size());
  if (left <= 0) return end_here(self, {st.request.id, "length", {}, st.resumed, {}});
  generate_request r = st.request;
  r.params.prompt.insert(r.params.prompt.end(), st.tokens.begin(), st.tokens.end());
  r.params.max_tokens = left;
  r.params.seed = gpu::sampling_state_after(st.request.params.seed, st.tokens.size());
  r.params.output_before = st.request.params.output_before + int32_t(st.tokens.size());
  ++st.resumed;
  // Its new owner takes the blocks that survived over; a request whose prompt's log probabilities have not come
  // yet (they come with the first token) starts over instead: they are computed from the prompt's logits.
  const bool starts_over = st.request.params.prompt_logprobs >= 0 && st.tokens.empty();
  r.takeover_generation = starts_over ? 0 : uint32_t(st.resumed);
  r.takeover_owner = starts_over ? 0 : st.serving_id;
  if (!st.tokens.empty()) r.lost_positions = uint32_t(r.params.prompt.size() - 1);
  if (st.instance) self->send(st.instance, cancel_request{st.request.id});  // an old owner only slow stops
  st.generated_before = int32_t(st.tokens.size());
  st.lost = caf::actor_addr{};
  submit(self, {target->instance, target->inst_id}, std::move(r));
}

caf::behavior request_behavior(self_ptr self, generate_request request, serving_instance instance,
                               request_callbacks callbacks, bool resume_elsewhere) {
  auto& st = self->state;
  st.request = std::move(request);
  st.request.client = caf::actor_cast<caf::actor>(self);
  st.callbacks = std::move(callbacks);
  st.resume_elsewhere = resume_elsewhere;
  self->set_down_handler([=](const caf::down_msg& down) {
    auto& st = self->state;
    if (down.source != st.instance.address()) return;  // one it left
    if (!st.resume_elsewhere) return end_with_error(self, "the instance serving the request stopped");
    st.lost = down.source;  // the next view without it says where to go on
    self->delayed_send(self, resume_wait, liveness_tick_atom::value);
  });
  submit(self, std::move(instance), st.request);
  return {
      [=](const token_event& t) {
        auto& st = self->state;
        if (st.ended || t.req_id != st.request.id || t.from != st.serving_id) return;
        if (int32_t(st.tokens.size()) >= st.request.params.max_tokens) return;  // never more than asked
        st.tokens.push_back(t.token);
        if (st.callbacks.on_token_event)
          st.callbacks.on_token_event(t);
        else if (st.callbacks.on_token)
          st.callbacks.on_token(t.token);
      },
      [=](request_finished& f) {
        if (f.req_id != self->state.request.id || f.from != self->state.serving_id) return;
        f.preemptions += self->state.resumed;  // its new instance counts from where it went on
        f.generated += self->state.generated_before;
        end(self, f);
      },
      [=](const cancel_request&) { self->send(self->state.instance, cancel_request{self->state.request.id}); },
      [=](const cluster_view& v) {  // its instance's down message may not reach this process: the view tells
        if (v.has_member(self->state.serving_id)) return;  // there, or only silent a while
        if (!self->state.resume_elsewhere)
          return end_with_error(self, "the instance serving the request left the cluster");
        resume(self, v);
      },
      [=](liveness_tick_atom) {
        if (self->state.lost && self->state.lost == self->state.instance.address())
          end_with_error(self, "the instance serving the request stopped");
      },
  };
}

}  // namespace

caf::actor spawn_request(caf::actor_system& sys, generate_request request, serving_instance instance,
                         request_callbacks callbacks, bool resume_elsewhere) {
  return sys.spawn(request_behavior, std::move(request), std::move(instance), std::move(callbacks), resume_elsewhere);
}

}  // namespace illm::actors
