// Owner takeover at the new owner (actors/messages/takeover.hpp): a request that went on from an owner that died
// waits until the rManager has taken over the blocks that survived elsewhere (take_over), then queues first
// with them as its table's prefix; only the positions after it are computed again.
#include "actors/instance/state.hpp"

namespace illm::actors::instance_impl {

void give_back(self_ptr self, request_id id, const taken_over& t) {
  auto& st = self->state;
  bool elsewhere = false;
  for (size_t i = 0; i < t.holders.size(); ++i) {
    if (t.holders[i] == st.config.id)
      (void)st.blocks->release({st.config.id, t.physical[i]});
    else
      elsewhere = true;
  }
  if (elsewhere) self->send(st.config.rmanager, request_released{id});
}

std::optional<generate_request> answered_blocks(self_ptr self, request_id id, taken_over& t) {
  auto& st = self->state;
  auto it = st.taking_over.find(id);
  if (it == st.taking_over.end()) {  // cancelled meanwhile
    give_back(self, id, t);
    return std::nullopt;
  }
  generate_request r = std::move(it->second);
  st.taking_over.erase(it);
  if (t.holders.size() != t.physical.size() || t.holders.size() * gpu::kv_block_tokens >= r.params.prompt.size()) {
    give_back(self, id, t);
    t = {};
  }
  return r;
}

namespace {

/// The rManager took what survived of request `id` over: it queues first, its table starting with those blocks.
void on_taken_over(self_ptr self, request_id id, taken_over t, int64_t since_ns) {
  auto& st = self->state;
  std::optional<generate_request> asked = answered_blocks(self, id, t);
  if (!asked) return;
  generate_request& r = *asked;
  // Copies promoted: by replica; only surviving primaries adopted: by takeover; nothing: computed again (when its
  // old owner had computed anything: one that died before its first token may have lost nothing).
  const char* how = t.promoted > 0 ? "replica" : !t.holders.empty() ? "takeover" : "recompute";
  if (auto* m = st.config.metrics.get(); m && (!t.holders.empty() || r.lost_positions > 0))
    m->requests_recovered.with({std::to_string(st.config.id), how}).add();
  st.adopted[id] = {std::move(t), since_ns};
  queue_first(self, std::move(r));
  maybe_step(self);
}

}  // namespace

bool begin_takeover(self_ptr self, generate_request& r) {
  auto& st = self->state;
  if (r.takeover_generation == 0) return false;
  if (r.params.prompt.size() <= gpu::kv_block_tokens) {  // no full block to take over: computed again
    if (auto* m = st.config.metrics.get(); m && r.lost_positions > 0)
      m->requests_recovered.with({std::to_string(st.config.id), "recompute"}).add();
    return false;
  }
  const request_id id = r.id;
  const take_over ask{id, r.takeover_owner, r.takeover_generation,
                      uint32_t((r.params.prompt.size() - 1) / gpu::kv_block_tokens)};
  const int64_t since = now_ns(self);
  st.taking_over.emplace(id, std::move(r));
  self->request(st.config.rmanager, caf::infinite, ask)
      .then([=](taken_over& t) { on_taken_over(self, id, std::move(t), since); },
            [=](const caf::error& e) { on_taken_over(self, id, taken_over{{}, {}, self->system().render(e)}, since); });
  return true;
}

bool cancel_takeover(self_ptr self, request_id id) {
  auto& st = self->state;
  auto it = st.taking_over.find(id);
  if (it == st.taking_over.end()) return false;
  tell_client(self, it->second.client, request_finished{id, "cancelled", {}, 0, {}});
  st.taking_over.erase(it);  // what the rManager takes over meanwhile goes back when it answers
  st.requests.erase(id);     // one that started over and looked for its prefix
  st.resuming.erase(id);
  return true;
}

adopted_count adopted_blocks(const instance_state& st, request_id id) {
  adopted_count out;
  if (auto it = st.adopted.find(id); it != st.adopted.end())
    for (instance_id h : it->second.blocks.holders) ++(h == st.config.id ? out.here : out.elsewhere);
  return out;
}

void apply_adopted(self_ptr self, running_request& r) {
  auto& st = self->state;
  auto it = st.adopted.find(r.seq->id);
  if (it == st.adopted.end()) return;
  const taken_over& t = it->second.blocks;
  for (size_t i = 0; i < t.holders.size(); ++i) r.seq->table.push_back({t.holders[i], t.physical[i]});
  r.seq->n_cached = int(t.holders.size() * gpu::kv_block_tokens);
  if (it->second.from == adopted_prefix::source::cached_prefix) {  // a prefix read where a member's cache holds it
    r.seq->cached_prompt_tokens = r.seq->n_cached;
    r.seq->prefix_looked_up = true;
  } else if (it->second.from == adopted_prefix::source::takeover) {
    r.lost_at_ns = it->second.since_ns;  // its next token ends the recovery
    r.tokens_at_loss = r.seq->tokens.size();
  }
  st.adopted.erase(it);
}

void drop_adopted(self_ptr self, request_id id) {
  auto it = self->state.adopted.find(id);
  if (it == self->state.adopted.end()) return;
  give_back(self, id, it->second.blocks);
  self->state.adopted.erase(it);
}

}  // namespace illm::actors::instance_impl
