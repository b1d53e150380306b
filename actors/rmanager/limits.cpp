// The limits a peer's messages must keep. CAF's wire format caps no vector, so a member can name any number of
// blocks or hold any number of reservations; the handlers a peer reaches check each message after decoding.
// A message beyond a limit is refused, logged and counted, and its sender (known by its actor, not by the id it
// claims) is reported to the gManager, which expels it from the cluster.
#include <fmt/format.h>

#include <algorithm>

#include "actors/rmanager/state.hpp"

namespace illm::actors::rmanager_impl {

namespace {

/// Why `what` naming `n` blocks (or places) is too many; empty when it is not.
std::string too_many(const char* what, size_t n, uint32_t most) {
  return n <= most ? std::string() : fmt::format("{} names {} blocks (at most {})", what, n, most);
}

/// Why two lists that go together differ in length; empty when they do not.
std::string unpaired(const char* what, size_t a, size_t b) {
  return a == b ? std::string() : fmt::format("{} pairs {} blocks with {} places", what, a, b);
}

/// The first reason that is not empty.
std::string first_of(std::initializer_list<std::string> reasons) {
  for (const std::string& r : reasons)
    if (!r.empty()) return r;
  return {};
}

/// The member whose rManager sent the current message; none for a sender that is no member.
std::optional<instance_id> sender_member(self_ptr self) {
  const caf::actor_addr sender = caf::actor_cast<caf::actor_addr>(self->current_sender());
  if (!sender) return std::nullopt;
  for (const auto& [id, rm] : self->state.member_rmanagers)
    if (rm.address() == sender) return id;
  return std::nullopt;
}

}  // namespace

std::string over_limit(const rmanager_state& st, const try_move_kvcache& m) {
  const uint32_t most = st.config.peer_max_blocks;
  if (std::string why = too_many("try_move_kvcache", m.num_blocks, most); !why.empty()) return why;
  const auto open = std::count_if(st.incoming.begin(), st.incoming.end(), [&](const auto& in) {
    return in.second.src == m.src_inst && in.second.stage == incoming_move::state::reserved;
  });
  if (size_t(open) < st.config.peer_max_open_moves) return {};
  return fmt::format("instance {} holds {} open reservations here (at most {})", m.src_inst, open,
                     st.config.peer_max_open_moves);
}

std::string over_limit(const rmanager_state& st, const commit_move& m) {
  return too_many("commit_move", m.logical.size(), st.config.peer_max_blocks);
}

std::string over_limit(const rmanager_state& st, const keep_blocks& m) {
  return too_many("keep_blocks", m.num_blocks, st.config.peer_max_blocks);
}

std::string over_limit(const rmanager_state& st, const replicate_blocks& m) {
  return first_of({too_many("replicate_blocks", m.logical.size(), st.config.peer_max_blocks),
                   unpaired("replicate_blocks", m.physical.size(), m.logical.size())});
}

std::string over_limit(const rmanager_state& st, const replicas_lost& m) {
  return too_many("replicas_lost", m.logical.size(), st.config.peer_max_blocks);
}

std::string over_limit(const rmanager_state& st, const promote_replicas& m) {
  return first_of({too_many("promote_replicas", m.logical.size(), st.config.peer_max_blocks),
                   unpaired("promote_replicas", m.at.size(), m.logical.size())});
}

std::string over_limit(const rmanager_state& st, const adopt_orphan& m) {
  return too_many("adopt_orphan", m.keep.size() + m.promote.size(), st.config.peer_max_blocks);
}

std::string over_limit(const rmanager_state& st, const read_prefix& m) {
  if (m.tokens.size() != m.keys.size() * gpu::kv_block_tokens)
    return fmt::format("read_prefix names {} blocks with {} tokens", m.keys.size(), m.tokens.size());
  return too_many("read_prefix", size_t(m.first) + m.keys.size(), st.config.peer_max_blocks);
}

std::string over_limit(const rmanager_state& st, const copy_prefix& m) {
  if (m.tokens.size() != m.keys.size() * gpu::kv_block_tokens)
    return fmt::format("copy_prefix names {} blocks with {} tokens", m.keys.size(), m.tokens.size());
  return too_many("copy_prefix", m.keys.size(), std::min<size_t>(st.config.peer_max_blocks, replica_batch_blocks));
}

bool within_limits(self_ptr self, const std::string& why) {
  if (why.empty()) return true;
  auto& st = self->state;
  const std::optional<instance_id> offender = sender_member(self);
  plane_log(st, fmt::format("rmanager {}: refused a message of {}: {}", st.config.id,
                            offender ? "instance " + std::to_string(*offender) : std::string("a sender that is no member"),
                            why));
  if (st.config.metrics) st.config.metrics->peer_limit_violations.with({std::to_string(st.config.id)}).add();
  if (offender && *offender != st.config.id && st.config.gmanager)
    self->send(st.config.gmanager, expel_member{*offender, st.config.id, why});
  return false;
}

}  // namespace illm::actors::rmanager_impl
