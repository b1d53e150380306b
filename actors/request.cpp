#include "actors/request.hpp"

#include <algorithm>

namespace illm::actors {

struct request_state {
  generate_request request;
  std::vector<int32_t> tokens;
  request_callbacks callbacks;
  caf::actor instance;
  bool ended = false;
  static inline const char* name = "request";
};

namespace {

using self_ptr = caf::stateful_actor<request_state>*;

void end(self_ptr self, const request_finished& f) {
  auto& st = self->state;
  if (st.ended) return;  // exactly once
  st.ended = true;
  if (st.callbacks.on_finished) st.callbacks.on_finished(f);
  self->quit();
}

caf::behavior request_behavior(self_ptr self, generate_request request, caf::actor instance,
                               request_callbacks callbacks) {
  auto& st = self->state;
  st.request = std::move(request);
  st.request.client = caf::actor_cast<caf::actor>(self);
  st.callbacks = std::move(callbacks);
  st.instance = std::move(instance);
  self->monitor(st.instance);
  self->set_down_handler([=](const caf::down_msg&) {
    end(self, {self->state.request.id, "error", "the instance serving the request stopped", 0, {}});
  });
  self->send(st.instance, st.request);
  return {
      [=](const token_event& t) {
        auto& st = self->state;
        if (st.ended || t.req_id != st.request.id) return;
        if (int32_t(st.tokens.size()) >= st.request.max_tokens) return;  // never more than asked
        st.tokens.push_back(t.token);
        if (st.callbacks.on_token) st.callbacks.on_token(t.token);
      },
      [=](const request_finished& f) {
        if (f.req_id == self->state.request.id) end(self, f);
      },
      [=](const cancel_request&) { self->send(self->state.instance, cancel_request{self->state.request.id}); },
      [=](const cluster_view& v) {  // its instance's down message may not reach this process: the view tells
        const caf::actor& mine = self->state.instance;
        if (std::none_of(v.instances.begin(), v.instances.end(), [&](const auto& i) { return i.instance == mine; }))
          end(self, {self->state.request.id, "error", "the instance serving the request left the cluster", 0, {}});
      },
  };
}

}  // namespace

caf::actor spawn_request(caf::actor_system& sys, generate_request request, caf::actor instance,
                         request_callbacks callbacks) {
  return sys.spawn(request_behavior, std::move(request), std::move(instance), std::move(callbacks));
}

}  // namespace illm::actors
