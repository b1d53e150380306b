// Replicas: second copies of the full blocks of long requests, so that the loss of an instance does not lose
// them. The owner's rManager asks its instance, one copy at a time, for blocks that lack a copy (all at one
// holder: the owner itself or an instance hosting them), picks another instance with free memory and asks the
// holder to copy them there. The holder copies them as it moves blocks (reserve, put, flush, commit), but
// nothing switches: the destination keeps them as spare blocks of its pool, free for anyone who needs memory,
// and tells the owner when it gave them up. A copy that fails is given back and tried again later.
#include <algorithm>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "actors/rmanager/state.hpp"
#include "gpu/prefix_cache.hpp"

namespace illm::actors::rmanager_impl {

namespace {

/// Heartbeats to wait after a copy that could not be made.
constexpr uint32_t replica_pause_beats = 10;

/// Where the copy of blocks held at `holder` goes: the member with the most room for replicas (other than the
/// holder), if it has room for them.
const instance_view* replica_destination(const rmanager_state& st, instance_id holder, uint32_t blocks) {
  const instance_view* best = nullptr;
  for (const instance_view& i : st.view.instances) {
    if (i.inst_id == holder || i.draining || !i.rmanager) continue;
    if (holder == st.config.id && !reachable(st, i.inst_id)) continue;
    if (!best || i.replica_room() > best->replica_room()) best = &i;
  }
  return best && best->replica_room() >= blocks ? best : nullptr;
}

/// A copy of this instance's blocks ended: the instance unmarks them (and hears where they are when it was made).
void replica_done(self_ptr self, const block_pick& pick, instance_id dst, bool ok, const std::string& why = {}) {
  auto& st = self->state;
  st.replica_in_flight = false;
  if (!ok) {
    plane_log(st, fmt::format("rmanager {}: no copy of {} block(s) of request {} at instance {} to instance {}: {}",
                              st.config.id, pick.logical.size(), pick.req_id, pick.holder, dst, why));
    st.replica_pause = replica_pause_beats;
    if (auto peer = rmanager_of(self, dst)) self->send(*peer, abort_move{pick.id});  // a late commit goes back
    self->send(st.instance, move_abandoned{pick.id, pick.req_id, pick.logical});
    return;
  }
  self->request(st.instance, caf::infinite, blocks_replicated{pick.id, pick.req_id, dst, pick.logical})
      .then([=](bool kept) {
        if (kept) return;
        if (auto peer = rmanager_of(self, dst)) self->send(*peer, abort_move{pick.id});  // the request is gone
      });
}

/// The instance picked blocks to copy: ask their holder to copy them to the sparest other instance.
void send_replica(self_ptr self, block_pick pick) {
  auto& st = self->state;
  if (pick.logical.empty()) {
    st.replica_in_flight = false;
    return;
  }
  const instance_view* dst = replica_destination(st, pick.holder, uint32_t(pick.logical.size()));
  auto holder = rmanager_of(self, pick.holder);
  if (!dst || !holder) return replica_done(self, pick, 0, false, "no instance has room for them");
  const instance_id to = dst->inst_id;
  st.replica_holders[pick.req_id].insert(to);  // the request's release reaches it, whatever becomes of the copy
  self->request(*holder, 2 * st.config.answer_timeout,
                replicate_blocks{pick.id, pick.req_id, st.config.id, pick.logical, pick.physical, to})
      .then([=](const replica_result& r) { replica_done(self, pick, to, r.ok, r.reason); },
            [=](const caf::error& e) { replica_done(self, pick, to, false, self->system().render(e)); });
}

/// Whether this instance holds `r`'s blocks as named: its own request's blocks in its pool (its own, or its prefix
/// cache's, which the request reads), or hosted here.
bool holds_as_named(const rmanager_state& st, const replicate_blocks& r) {
  if (r.logical.empty() || r.logical.size() != r.physical.size() || r.logical.size() > replica_batch_blocks)
    return false;
  if (r.owner == st.config.id) {
    const gpu::block_owner cached{gpu::prefix_cache_request, st.config.id};
    for (uint32_t b : r.physical)
      if (!st.config.pool->is_used(b) ||
          (st.config.pool->owner(b).request != r.req_id && st.config.pool->owner(b) != cached))
        return false;
    return true;
  }
  const auto hosted = st.config.hosted->find_logical(r.owner, r.req_id, logical_runs(r.logical));
  return hosted && hosted->physical == r.physical;
}

/// The most blocks one copy may take so that, whichever member holds them, another member has room for them all:
/// the second largest room for replicas in the view (capped at a batch). Asking for more would pick blocks that
/// fit nowhere whole while the room is spread over the members.
uint32_t replica_pick_size(const rmanager_state& st) {
  uint32_t first = 0, second = 0;
  for (const instance_view& i : st.view.instances) {
    if (i.draining || !i.rmanager) continue;
    const uint32_t room = i.replica_room();
    if (room > first) {
      second = first;
      first = room;
    } else if (room > second) {
      second = room;
    }
  }
  return std::min(second, replica_batch_blocks);
}

}  // namespace

void maybe_replicate(self_ptr self) {
  auto& st = self->state;
  if (st.replica_pause > 0) {
    --st.replica_pause;
    return;
  }
  if (st.config.replica_min_tokens == 0 || st.replica_in_flight || !st.instance || st.draining ||
      st.view.instances.size() < 2)
    return;
  const uint32_t pick_size = replica_pick_size(st);
  if (pick_size == 0) return;
  st.replica_in_flight = true;
  const move_id id = (uint64_t(st.config.id) + 1) << 40 | st.next_move++;
  self->request(st.instance, caf::infinite, pick_replicas{id, st.config.replica_min_tokens, pick_size})
      .then([=](block_pick& pick) { send_replica(self, std::move(pick)); },
            [=](const caf::error&) { self->state.replica_in_flight = false; });
}

caf::result<replica_result> copy_replica(self_ptr self, const replicate_blocks& r) {
  auto& st = self->state;
  if (st.outgoing.count(r.id)) return replica_result{r.id, false, "a copy with this id is under way"};
  if (!holds_as_named(st, r)) return replica_result{r.id, false, "the blocks are not here as named"};
  const instance_view* dst = st.view.find(r.dst);
  if (!dst || !dst->rmanager || r.dst == st.config.id || !reachable(st, r.dst))
    return replica_result{r.id, false, fmt::format("instance {} is not a destination", r.dst)};
  outgoing_move& move = st.outgoing[r.id];
  move.req = r.req_id;
  move.dst = r.dst;
  move.dst_rmanager = dst->rmanager;
  move.asked = uint32_t(r.logical.size());
  move.replica = true;
  move.owner = r.owner;
  move.replica_answer = self->make_response_promise<replica_result>();
  auto answer = move.replica_answer;
  reserve(self, r.id, block_pick{r.id, r.req_id, r.logical, r.physical, st.config.id});
  return answer;
}

void finish_replica(self_ptr self, move_id id, bool ok, std::string reason) {
  auto& st = self->state;
  auto it = st.outgoing.find(id);
  if (it == st.outgoing.end()) return;
  outgoing_move move = std::move(it->second);
  st.outgoing.erase(it);
  if (!ok && move.reservation.granted) self->send(move.dst_rmanager, abort_move{id});
  for (uint32_t b : move.cache_readers) free_block(st, b);  // a copy of cached blocks: they stay the cache's
  if (move.replica_answer.pending()) move.replica_answer.deliver(replica_result{id, ok, std::move(reason)});
}

uint32_t replica_room(const rmanager_state& st) {
  const uint32_t unspoken = st.spare_blocks();
  const uint32_t free_list = st.config.pool->free_blocks() - st.config.pool->spare_blocks();
  const instance_view* me = st.view.find(st.config.id);
  const uint32_t held = me ? me->held_for_room : 0;
  const uint32_t room = std::min(unspoken, free_list);
  return room - std::min(room, held);
}

void keep_replica(self_ptr self, move_id id, incoming_move& move, const std::vector<uint32_t>& logical) {
  auto& st = self->state;
  move.logical = logical;
  move.spare = st.config.pool->make_spare(move.blocks);
  for (const gpu::spare_block& s : move.spare) st.replica_index[{s.block, s.generation}] = id;
}

void drop_replica(self_ptr self, incoming_move& move) {
  auto& st = self->state;
  for (const gpu::spare_block& s : move.spare) {
    st.replica_index.erase({s.block, s.generation});
    st.config.pool->release_spare(s);
  }
  move.spare.clear();
  move.logical.clear();
  move.blocks.clear();
}

void on_spare_reclaimed(self_ptr self, const spare_reclaimed& r) {
  auto& st = self->state;
  std::map<move_id, std::vector<uint32_t>> lost;  // logical blocks, per replica move
  for (size_t i = 0; i < r.blocks.size() && i < r.generations.size(); ++i) {
    auto it = st.replica_index.find({r.blocks[i], r.generations[i]});
    if (it == st.replica_index.end()) continue;
    const move_id id = it->second;
    st.replica_index.erase(it);
    incoming_move& move = st.incoming.at(id);
    for (size_t k = 0; k < move.spare.size(); ++k) {
      if (move.spare[k].block != r.blocks[i] || move.spare[k].generation != r.generations[i]) continue;
      lost[id].push_back(move.logical[k]);
      move.spare.erase(move.spare.begin() + long(k));
      move.logical.erase(move.logical.begin() + long(k));
      move.blocks.erase(move.blocks.begin() + long(k));
      break;
    }
    if (move.spare.empty()) move.stage = incoming_move::state::given_back;
  }
  for (auto& [id, logical] : lost) {
    const incoming_move& move = st.incoming.at(id);
    if (auto owner = rmanager_of(self, move.src))
      self->send(*owner, replicas_lost{move.req, move.src, st.config.id, std::move(logical)});
  }
}

void on_replicas_lost(self_ptr self, const replicas_lost& r) {
  if (r.owner == self->state.config.id && self->state.instance) self->send(self->state.instance, r);
}

}  // namespace illm::actors::rmanager_impl

namespace illm::actors::rmanager_impl {

namespace {

/// Where the copy of logical block `l` of (owner, req) is kept here: its move and its place in it.
std::optional<std::pair<move_id, size_t>> find_copy(const rmanager_state& st, instance_id owner, request_id req,
                                                    uint32_t l) {
  for (const auto& [id, move] : st.incoming) {
    if (!move.replica || move.src != owner || move.req != req || move.stage != incoming_move::state::committed) continue;
    for (size_t k = 0; k < move.logical.size(); ++k)
      if (move.logical[k] == l) return std::pair{id, k};
  }
  return std::nullopt;
}

}  // namespace

std::vector<uint32_t> copies_kept(const rmanager_state& st, instance_id owner, request_id req) {
  std::vector<uint32_t> out;
  for (const auto& [id, move] : st.incoming)
    if (move.replica && move.src == owner && move.req == req && move.stage == incoming_move::state::committed)
      out.insert(out.end(), move.logical.begin(), move.logical.end());
  return out;
}

replicas_promoted promote_here(self_ptr self, const promote_replicas& p) {
  auto& st = self->state;
  std::vector<std::pair<move_id, size_t>> where;
  std::vector<gpu::spare_block> names;
  for (uint32_t l : p.logical) {
    const auto copy = find_copy(st, p.owner, p.req_id, l);
    if (!copy) return {false, fmt::format("instance {} has no copy of block {} of request {}", st.config.id, l, p.req_id), {}};
    where.push_back(*copy);
    names.push_back(st.incoming.at(copy->first).spare[copy->second]);
  }
  if (!st.config.pool->claim_spare(names))
    return {false, fmt::format("instance {} gave a copy of request {} up meanwhile", st.config.id, p.req_id), {}};
  std::map<move_id, std::vector<size_t>, std::less<>> taken;
  for (const auto& [id, k] : where) taken[id].push_back(k);
  for (auto& [id, places] : taken) {
    incoming_move& move = st.incoming.at(id);
    std::sort(places.rbegin(), places.rend());
    for (size_t k : places) {
      st.replica_index.erase({move.spare[k].block, move.spare[k].generation});
      move.spare.erase(move.spare.begin() + long(k));
      move.logical.erase(move.logical.begin() + long(k));
      move.blocks.erase(move.blocks.begin() + long(k));
    }
    if (move.spare.empty()) move.stage = incoming_move::state::given_back;
  }
  replicas_promoted out{true, {}, {}};
  for (const gpu::spare_block& s : names) out.blocks.push_back(s.block);
  if (p.owner != st.config.id) st.config.hosted->add(p.owner, p.req_id, p.logical, out.blocks);
  return out;
}

namespace {

/// The answers of the holders asked to promote copies, gathered into one.
struct promotion {
  caf::typed_response_promise<replicas_promoted> answer;
  replicas_promoted result{true, {}, {}};
  size_t holders_left = 0;
};

}  // namespace

caf::result<replicas_promoted> promote(self_ptr self, const promote_replicas& p) {
  auto& st = self->state;
  if (p.logical.empty() || p.logical.size() != p.at.size()) return replicas_promoted{false, "a malformed promotion", {}};
  if (std::all_of(p.at.begin(), p.at.end(), [&](instance_id at) { return at == st.config.id; }))
    return promote_here(self, p);
  std::map<instance_id, std::vector<size_t>> groups;
  for (size_t k = 0; k < p.at.size(); ++k) groups[p.at[k]].push_back(k);
  auto gathered = std::make_shared<promotion>();
  gathered->answer = self->make_response_promise<replicas_promoted>();
  gathered->result.blocks.resize(p.logical.size());
  gathered->holders_left = groups.size();
  for (const auto& [holder, places] : groups) {
    promote_replicas part{p.req_id, p.owner, {}, {}};
    for (size_t k : places) {
      part.logical.push_back(p.logical[k]);
      part.at.push_back(holder);
    }
    auto done = [self, gathered, places, holder, req = p.req_id](const replicas_promoted& r) {
      replicas_promoted& all = gathered->result;
      if (!r.ok || r.blocks.size() != places.size()) {
        if (all.ok) all.reason = r.ok ? "a promotion answered the wrong blocks" : r.reason;
        all.ok = false;
      } else {
        for (size_t i = 0; i < places.size(); ++i) all.blocks[places[i]] = r.blocks[i];
        if (holder != self->state.config.id && self->state.replica_holders.count(req))  // not ended meanwhile
          note_placed(self->state, req, holder, uint32_t(places.size()));
      }
      if (--gathered->holders_left == 0) gathered->answer.deliver(std::move(all));
    };
    auto peer = rmanager_of(self, holder);
    if (holder == st.config.id || !peer) {
      done(holder == st.config.id ? promote_here(self, part)
                                  : replicas_promoted{false, fmt::format("instance {} is unknown", holder), {}});
      continue;
    }
    self->request(*peer, st.config.answer_timeout, part)
        .then(done, [done, holder](const caf::error&) {
          done(replicas_promoted{false, fmt::format("instance {} did not answer the promotion", holder), {}});
        });
  }
  return gathered->answer;
}

}  // namespace illm::actors::rmanager_impl
