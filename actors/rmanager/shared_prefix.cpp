// The cluster-wide prefix cache at an rManager (actors/messages/prefix_cache.hpp). For its own instance's new
// request: the gManager's index names the runs of the prompt's blocks the members' caches hold between them (a
// conversation's turns may have run on several instances), and each run's holder, in chain order, is asked to
// attach it for the request where it lies (this pool's own runs are attached here); those blocks then count as the
// request's blocks at their holders (lent), released with the rest of the request. For a peer's request: the
// cache's blocks of a run, checked against their keys, parents and tokens, get one reader more and are kept as
// hosted blocks of (owner, request) at their logical places, which the attention servers read like any other.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <set>

#include "actors/rmanager/state.hpp"

namespace illm::actors::rmanager_impl {

namespace {

/// A prefix being read for one of this instance's requests: the index's runs, read one after the other.
struct prefix_reading {
  caf::typed_response_promise<taken_over> answer;
  find_prefix ask;
  std::vector<placement::prefix_segment> runs;
  /// Each member whose cache holds the chain's first blocks, with how many: where a run is read instead when its
  /// holder cannot be (gone, cut off, or it did not answer).
  std::vector<std::pair<instance_id, uint32_t>> leading;
  std::set<instance_id> failed;  ///< holders that did not answer a read, or that failed the request before it asked
  size_t next = 0;
  taken_over found;  ///< the blocks attached so far, in the chain's order
};
using reading_ptr = std::shared_ptr<prefix_reading>;

/// Lets go of the blocks found from logical place `at` on: this pool's lose their reader, and holders left with none
/// of the request's blocks release it (one that keeps earlier blocks keeps the rest too, unread, until it ends).
void drop_from(self_ptr self, prefix_reading& r, size_t at) {
  auto& st = self->state;
  std::set<instance_id> kept, dropped;
  for (size_t i = 0; i < r.found.holders.size(); ++i) {
    const instance_id holder = r.found.holders[i];
    if (i < at)
      kept.insert(holder);
    else if (holder == st.config.id)
      free_block(st, r.found.physical[i]);
    else
      dropped.insert(holder);
  }
  r.found.holders.resize(std::min(at, r.found.holders.size()));
  r.found.physical.resize(r.found.holders.size());
  for (instance_id holder : dropped)
    if (!kept.count(holder))
      if (auto peer = rmanager_of(self, holder)) self->send(*peer, release_blocks{r.ask.req_id, st.config.id});
}

/// The reading ends: the request gets what was found when it is more than its own pool holds, and nothing else.
void finish_reading(self_ptr self, const reading_ptr& r) {
  auto& st = self->state;
  if (r->found.holders.size() <= r->ask.more_than) {
    drop_from(self, *r, 0);
    r->answer.deliver(taken_over{});
    return;
  }
  std::map<instance_id, uint32_t> per_holder;
  for (instance_id holder : r->found.holders) ++per_holder[holder];
  for (const auto& [holder, n] : per_holder)
    if (holder != st.config.id) note_placed(st, r->ask.req_id, holder, n);
  plane_log(st, fmt::format("rmanager {}: request {} reads {} cached block(s) of its prompt at {} instance(s), {} here",
                            st.config.id, r->ask.req_id, r->found.holders.size(), per_holder.size(),
                            per_holder.count(st.config.id) ? per_holder.at(st.config.id) : 0));
  r->answer.deliver(std::move(r->found));
}

void read_next(self_ptr self, const reading_ptr& r);

/// Whether run `r.next` is the last: its holder is asked for the rest of the chain, which it may hold further than
/// the index knows (its reports lag its cache by up to a heartbeat, a conversation's last answer among them).
bool last_run(const prefix_reading& r) { return r.next + 1 == r.runs.size(); }

/// Run `r->next` came back as `blocks` at `holder`: they join the prefix; a run cut short ends it.
void add_run(self_ptr self, const reading_ptr& r, instance_id holder, const std::vector<uint32_t>& blocks) {
  const placement::prefix_segment& run = r->runs[r->next];
  const size_t usable = last_run(*r) ? blocks.size() : std::min<size_t>(blocks.size(), run.count);
  for (size_t i = 0; i < usable; ++i) {
    r->found.holders.push_back(holder);
    r->found.physical.push_back(blocks[i]);
  }
  if (usable < run.count) return finish_reading(self, r);  // evicted since its report: the chain ends there
  ++r->next;
  read_next(self, r);
}

/// One run and its holder: the key before it (`root`), its keys and tokens, as read_prefix asks for them.
struct run_ask {
  instance_id holder = 0;
  read_prefix run;
};

/// Asks the run's holder to attach it for the request where it lies; the round trip is measured.
void read_in_place(self_ptr self, const reading_ptr& r, run_ask run) {
  auto& st = self->state;
  auto peer = rmanager_of(self, run.holder);
  if (!peer || !reachable(st, run.holder)) return finish_reading(self, r);
  const instance_id holder = run.holder;
  const auto asked = self->clock().now();
  const request_id req = run.run.req_id;
  self->request(*peer, st.config.answer_timeout, std::move(run.run))
      .then(
          [=](const prefix_read& read) {
            note_round_trip(self->state, holder, std::chrono::duration<double>(self->clock().now() - asked).count());
            add_run(self, r, holder, read.physical);
          },
          [=](const caf::error&) {
            // It may still attach them (the release, sent after, reaches it after the ask): the request reads
            // nothing there, from its first block there on; with nothing read there before, another holder may.
            auto there = std::find(r->found.holders.begin(), r->found.holders.end(), holder);
            const bool none_before = there == r->found.holders.end();
            drop_from(self, *r, size_t(there - r->found.holders.begin()));
            self->send(*peer, release_blocks{req, self->state.config.id});
            r->failed.insert(holder);
            if (none_before) return read_next(self, r);
            finish_reading(self, r);
          });
}

/// Has the run's holder copy it into this pool's cache, then attaches it here; read in place if the copy fails.
void copy_then_attach(self_ptr self, const reading_ptr& r, run_ask run) {
  auto& st = self->state;
  auto peer = rmanager_of(self, run.holder);
  if (!peer || !reachable(st, run.holder)) return finish_reading(self, r);
  const move_id id = (uint64_t(st.config.id) + 1) << 40 | st.next_move++;
  auto shared = std::make_shared<run_ask>(std::move(run));
  const read_prefix& run_of = shared->run;
  ask_copy(self, shared->holder, *peer, copy_prefix{id, run_of.req_id, st.config.id, run_of.root, run_of.keys, run_of.tokens, st.config.kv},
           [=](bool copied) {
             auto& s = self->state;
             if (!copied) return read_in_place(self, r, std::move(*shared));
             const read_prefix& run_copied = shared->run;
             plane_log(s, fmt::format("rmanager {}: request {} copied {} cached block(s) of its prompt from instance {}",
                                      s.config.id, run_copied.req_id, run_copied.keys.size(), shared->holder));
             add_run(self, r, s.config.id, s.config.prefix_cache->attach_run(run_copied.root, run_copied.keys, run_copied.tokens));
           });
}

/// Whether this request's blocks can be read at `holder` now.
bool readable_at(self_ptr self, const prefix_reading& r, instance_id holder) {
  auto& st = self->state;
  return holder == st.config.id ||
         (!r.failed.count(holder) && st.view.find(holder) && reachable(st, holder) && rmanager_of(self, holder));
}

/// Run `r.next` at a holder that cannot be read: another member whose cache holds the chain from its start past
/// the run's first block reads it instead (the one that holds most of it); false when none does.
bool read_elsewhere(self_ptr self, prefix_reading& r) {
  placement::prefix_segment& run = r.runs[r.next];
  const std::pair<instance_id, uint32_t>* best = nullptr;
  for (const auto& member : r.leading)
    if (member.second > run.first && readable_at(self, r, member.first) && (!best || member.second > best->second))
      best = &member;
  if (!best) return false;
  run.holder = best->first;
  run.count = std::min(run.count, best->second - run.first);
  r.runs.resize(r.next + 1);  // the chain past it is asked of this holder (last_run)
  return true;
}

void read_next(self_ptr self, const reading_ptr& r) {
  auto& st = self->state;
  if (r->next == r->runs.size()) return finish_reading(self, r);
  if (!readable_at(self, *r, r->runs[r->next].holder) && !read_elsewhere(self, *r)) return finish_reading(self, r);
  const placement::prefix_segment segment = r->runs[r->next];
  const find_prefix& f = r->ask;
  if (segment.first != r->found.holders.size() || segment.count == 0 ||
      size_t(segment.first) + segment.count > f.keys.size())
    return finish_reading(self, r);
  const size_t end = last_run(*r) ? f.keys.size() : size_t(segment.first) + segment.count;
  run_ask run{segment.holder, {f.req_id, st.config.id, segment.first == 0 ? f.root : f.keys[segment.first - 1],
                                std::vector<gpu::block_key>(f.keys.begin() + segment.first, f.keys.begin() + ptrdiff_t(end)),
                                std::vector<int32_t>(f.tokens.begin() + ptrdiff_t(segment.first) * gpu::kv_block_tokens,
                                                     f.tokens.begin() + ptrdiff_t(end) * gpu::kv_block_tokens),
                                segment.first, st.config.kv}};
  const read_prefix& ask = run.run;
  if (run.holder == st.config.id) {
    const auto blocks = st.config.prefix_cache ? st.config.prefix_cache->attach_run(ask.root, ask.keys, ask.tokens)
                                               : std::vector<uint32_t>{};
    return add_run(self, r, run.holder, blocks);
  }
  // A step's queries go to every holder at once: one already read in place pays the round trips this run would.
  const bool reads_elsewhere = std::any_of(r->found.holders.begin(), r->found.holders.end(),
                                           [&](instance_id h) { return h != st.config.id; });
  if (copy_run_here(st, run.holder, uint32_t(ask.keys.size()), f.decode_tokens, reads_elsewhere))
    return copy_then_attach(self, r, std::move(run));
  read_in_place(self, r, std::move(run));
}

}  // namespace

namespace {

/// The index answered which members hold the chain's blocks: the runs are read in turn, when they cover more than
/// this pool's cache holds.
void read_runs(self_ptr self, const reading_ptr& r, prefix_holders h) {
  uint32_t covered = 0;
  for (const auto& run : h.cover) covered += run.count;
  if (covered <= r->ask.more_than) {
    r->answer.deliver(taken_over{});
    return;
  }
  r->runs = std::move(h.cover);
  for (size_t i = 0; i < h.holders.size() && i < h.blocks.size(); ++i) r->leading.emplace_back(h.holders[i], h.blocks[i]);
  read_next(self, r);
}

}  // namespace

caf::result<taken_over> find_shared_prefix(self_ptr self, const find_prefix& f) {
  auto& st = self->state;
  if (!st.config.gmanager || f.keys.empty() || f.tokens.size() != f.keys.size() * gpu::kv_block_tokens)
    return taken_over{};
  auto r = std::make_shared<prefix_reading>();
  r->answer = self->make_response_promise<taken_over>();
  r->ask = f;
  r->failed.insert(f.avoid.begin(), f.avoid.end());
  if (f.found) {  // the front end's lookup, a moment old: its runs are read as they are
    read_runs(self, r, std::move(r->ask.holders));
    return r->answer;
  }
  self->request(st.config.gmanager, st.config.answer_timeout, prefix_lookup{f.keys})
      .then([=](prefix_holders& h) { read_runs(self, r, std::move(h)); },
            [=](const caf::error&) { r->answer.deliver(taken_over{}); });
  return r->answer;
}

prefix_read read_for_peer(self_ptr self, const read_prefix& r) {
  auto& st = self->state;
  if (!st.config.prefix_cache || r.owner == st.config.id || !st.member_rmanagers.count(r.owner) ||
      !(r.kv == st.config.kv))
    return {};  // nothing cached here for it (KV of another model or type is never read for it)
  // Asked again (a duplicate, or an ask after a lost answer): the same blocks, not another reader.
  const auto kept = st.config.hosted->logical_map(r.owner, r.req_id);
  if (kept.count(r.first)) {
    prefix_read again;
    for (auto at = kept.find(r.first); at != kept.end() && at->first == r.first + again.physical.size(); ++at)
      again.physical.push_back(at->second);
    return again;
  }
  prefix_read out{st.config.prefix_cache->attach_for_peer(r.root, r.keys, r.tokens)};
  if (out.physical.empty()) return out;
  std::vector<uint32_t> logical(out.physical.size());
  for (uint32_t i = 0; i < logical.size(); ++i) logical[i] = r.first + i;
  st.config.hosted->add(r.owner, r.req_id, logical, out.physical);
  return out;
}

}  // namespace illm::actors::rmanager_impl
