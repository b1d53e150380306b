// The cluster-wide prefix cache at an rManager (actors/messages/prefix_cache.hpp). For its own instance's new
// request: the gManager's index names the members holding the prompt's prefix, and the one holding the most is
// asked to attach it for the request where it lies; those blocks then count as the request's blocks there (lent),
// released with the rest of the request. For a peer's request: the cache's blocks of the prefix, checked against
// their keys and tokens, get one reader more and are kept as hosted blocks of (owner, request), which the attention
// servers read like any other.
#include <fmt/format.h>

#include "actors/rmanager/state.hpp"

namespace illm::actors::rmanager_impl {

namespace {

/// The request's prefix as `holder` read it: counted as the request's blocks there, or (too short) given back.
taken_over prefix_taken(self_ptr self, const find_prefix& f, instance_id holder, const prefix_read& read) {
  auto& st = self->state;
  const uint32_t n = uint32_t(read.physical.size());
  if (n == 0) return {};
  if (n <= f.more_than || n > f.keys.size()) {
    if (auto peer = rmanager_of(self, holder)) self->send(*peer, release_blocks{f.req_id, st.config.id});
    return {};
  }
  note_placed(st, f.req_id, holder, n);
  plane_log(st, fmt::format("rmanager {}: request {} reads {} cached block(s) of its prompt at instance {}", st.config.id,
                            f.req_id, n, holder));
  return {std::vector<instance_id>(n, holder), read.physical, {}, 0};
}

/// Asks the member holding the most of the prefix (more than this pool) to attach it for the request.
void read_at_holder(self_ptr self, caf::typed_response_promise<taken_over> answer, const find_prefix& f,
                    const prefix_holders& h) {
  auto& st = self->state;
  for (size_t i = 0; i < h.holders.size() && i < h.blocks.size(); ++i) {
    const instance_id holder = h.holders[i];
    const uint32_t blocks = std::min<uint32_t>(h.blocks[i], uint32_t(f.keys.size()));
    auto peer = rmanager_of(self, holder);
    if (holder == st.config.id || blocks <= f.more_than || !peer || !reachable(st, holder)) continue;
    read_prefix ask{f.req_id, st.config.id, f.root, {f.keys.begin(), f.keys.begin() + blocks},
                    {f.tokens.begin(), f.tokens.begin() + ptrdiff_t(blocks) * gpu::kv_block_tokens}};
    self->request(*peer, st.config.answer_timeout, std::move(ask))
        .then([=](const prefix_read& read) mutable { answer.deliver(prefix_taken(self, f, holder, read)); },
              [=](const caf::error&) mutable {
                // It may still attach them: the release, sent after, reaches it after the ask.
                self->send(*peer, release_blocks{f.req_id, self->state.config.id});
                answer.deliver(taken_over{});
              });
    return;
  }
  answer.deliver(taken_over{});
}

}  // namespace

caf::result<taken_over> find_shared_prefix(self_ptr self, const find_prefix& f) {
  auto& st = self->state;
  if (!st.config.gmanager || f.keys.empty() || f.tokens.size() != f.keys.size() * gpu::kv_block_tokens)
    return taken_over{};
  auto answer = self->make_response_promise<taken_over>();
  self->request(st.config.gmanager, st.config.answer_timeout, prefix_lookup{f.keys})
      .then([=](const prefix_holders& h) { read_at_holder(self, answer, f, h); },
            [=](const caf::error&) mutable { answer.deliver(taken_over{}); });
  return answer;
}

prefix_read read_for_peer(self_ptr self, const read_prefix& r) {
  auto& st = self->state;
  if (!st.config.prefix_cache || r.owner == st.config.id || !st.member_rmanagers.count(r.owner)) return {};
  // Asked again (a duplicate, or an ask after a lost answer): the same blocks, not another reader.
  if (const auto kept = st.config.hosted->logical_map(r.owner, r.req_id); !kept.empty()) {
    prefix_read again;
    for (const auto& [logical, physical] : kept) {
      if (logical != again.physical.size()) break;
      again.physical.push_back(physical);
    }
    return again;
  }
  prefix_read out{st.config.prefix_cache->attach_for_peer(r.root, r.keys, r.tokens)};
  if (out.physical.empty()) return out;
  std::vector<uint32_t> logical(out.physical.size());
  for (uint32_t i = 0; i < logical.size(); ++i) logical[i] = i;
  st.config.hosted->add(r.owner, r.req_id, logical, out.physical);
  return out;
}

}  // namespace illm::actors::rmanager_impl
