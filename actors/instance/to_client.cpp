// What the instance tells request actors: their tokens and their ends. Everything sent goes through the books'
// tap first (instance_config::tap), and a test of the books may have a defect planted in it (instance_config::plant).
#include "actors/instance/state.hpp"

namespace illm::actors::instance_impl {

namespace {

void send_token(self_ptr self, const caf::actor& client, const token_event& e) {
  if (const auto& tap = self->state.config.tap)
    tap({e.req_id, delivery::kind::token, e.from, e.token, 0, {}});
  caf::anon_send(client, e);
}

void send_end(self_ptr self, const caf::actor& client, const request_finished& e) {
  if (const auto& tap = self->state.config.tap) tap({e.req_id, delivery::kind::end, e.from, 0, 0, e.reason});
  caf::anon_send(client, e);
}

/// Whether the planted defect goes into request `id` now (once per request).
bool plant_in(self_ptr self, planted_defect d, request_id id) {
  return self->state.config.plant == d && self->state.planted.insert(id).second;
}

}  // namespace

void tell_client(self_ptr self, const caf::actor& client, token_event e) {
  e.from = self->state.config.id;
  if (plant_in(self, planted_defect::wrong_token, e.req_id)) e.token = e.token == 3 ? 4 : 3;
  send_token(self, client, e);
}

void tell_client(self_ptr self, const caf::actor& client, request_finished e) {
  auto& st = self->state;
  e.from = st.config.id;
  const bool reached_length = e.reason == gpu::to_string(gpu::finish_reason::length);
  if (reached_length && plant_in(self, planted_defect::token_past_max, e.req_id))
    send_token(self, client, token_event{e.req_id, 3, e.from});
  if (reached_length && plant_in(self, planted_defect::failed_fitting, e.req_id)) {
    e.reason = gpu::to_string(gpu::finish_reason::error);
    e.error = "a planted failure";
  }
  if (st.config.plant == planted_defect::leaked_block && st.planted.empty() && plant_in(self, st.config.plant, e.req_id))
    (void)st.config.pool->allocate({e.req_id, st.config.id});
  send_end(self, client, e);
  if (plant_in(self, planted_defect::second_end, e.req_id)) send_end(self, client, e);
}

}  // namespace illm::actors::instance_impl
