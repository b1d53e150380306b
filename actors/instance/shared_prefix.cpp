// The cluster-wide prefix cache at an instance (actors/messages/prefix_cache.hpp): a new request whose prompt's
// prefix this pool's cache does not hold whole asks its rManager, before it queues, for the longest prefix the
// members' caches hold between them (a conversation's turns may have run on several instances: its history lies in
// pieces). That prefix is attached for it where it lies and becomes its table's first blocks, their positions
// cached: its attention reads them in place, as it reads any block held elsewhere, and no KV moves. A request that
// lost KV and starts over from its tokens asks the same before it queues again: what survives in the caches (a
// shared prefix another cache keeps too, its own blocks at home) is read rather than computed again.
#include "actors/instance/state.hpp"

namespace illm::actors::instance_impl {

namespace {

/// The rManager answered request `id`'s lookup: it queues (first, when it starts over), with the prefix found (if
/// any) to start on.
void on_prefix_found(self_ptr self, request_id id, taken_over t, uint32_t queried_tokens, bool restart) {
  auto& st = self->state;
  std::optional<generate_request> r = answered_blocks(self, id, t);
  if (!r) return;
  if (!t.holders.empty()) {
    if (!restart) {
      const uint64_t here = uint64_t(std::count(t.holders.begin(), t.holders.end(), st.config.id));
      st.config.prefix_cache->note_hits(queried_tokens, here * gpu::kv_block_tokens,
                                        (t.holders.size() - here) * gpu::kv_block_tokens);
    }
    using source = adopted_prefix::source;
    st.adopted[id] = {std::move(t), 0, restart ? source::restart : source::cached_prefix};
  }
  if (restart) {
    queue_first(self, std::move(*r));
  } else {
    st.waiting.push_back(std::move(*r));
    st.waiting_since.push_back(st.views_received);
  }
  maybe_step(self);
}

/// Asks the rManager for the longest prefix of `r`'s tokens the members' caches hold, when it is more than this
/// pool's cache holds; false when there is nothing to ask (the request goes on without).
bool lookup_prefix(self_ptr self, generate_request& r, bool restart) {
  auto& st = self->state;
  std::set<instance_id> failed;
  if (auto lost = st.lost_at.find(r.id); lost != st.lost_at.end()) {
    failed = std::move(lost->second);
    st.lost_at.erase(lost);
  }
  const auto& prompt = r.params.prompt;
  if (!st.config.shared_prefixes || !st.config.prefix_cache || r.params.prompt_logprobs >= 0 ||
      prompt.size() <= gpu::kv_block_tokens)
    return false;
  // The last token's logits are sampled: its block is computed.
  const size_t blocks = (prompt.size() - 1) / gpu::kv_block_tokens;
  find_prefix ask;
  ask.req_id = r.id;
  ask.root = gpu::scoped_root(st.config.prefix_root, r.params.cache_scope);
  ask.keys = gpu::chain_keys(ask.root, prompt, blocks);
  ask.more_than = uint32_t(st.config.prefix_cache->match(ask.root, ask.keys, prompt));
  if (ask.more_than == ask.keys.size()) return false;  // this pool holds all of it
  ask.decode_tokens = uint32_t(std::max(r.params.max_tokens, 0));
  ask.avoid.assign(failed.begin(), failed.end());
  if (!restart && r.prefix_found) {  // the front end asked the index when it routed the request
    ask.found = true;
    ask.holders = std::move(r.prefix);
    r.prefix_found = false;
  }
  ask.tokens.assign(prompt.begin(), prompt.begin() + ptrdiff_t(blocks * gpu::kv_block_tokens));
  const request_id id = r.id;
  const uint32_t queried = uint32_t(blocks * gpu::kv_block_tokens);
  st.taking_over.emplace(id, std::move(r));
  self->request(st.config.rmanager, caf::infinite, std::move(ask))
      .then([=](taken_over& t) { on_prefix_found(self, id, std::move(t), queried, restart); },
            [=](const caf::error&) { on_prefix_found(self, id, {}, queried, restart); });
  return true;
}

}  // namespace

bool begin_prefix_lookup(self_ptr self, generate_request& r) {
  if (r.takeover_generation != 0 || r.params.output_before != 0) return false;  // a takeover looks at its holders
  return lookup_prefix(self, r, false);
}

bool begin_restart_lookup(self_ptr self, generate_request& r) { return lookup_prefix(self, r, true); }

}  // namespace illm::actors::instance_impl
