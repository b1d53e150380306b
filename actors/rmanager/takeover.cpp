// Owner takeover (actors/messages/takeover.hpp). As a holder: a departed owner's blocks are kept here for a
// lease (orphans), reported to a new owner that asks, and handed to it (primaries re-keyed, copies promoted,
// the rest freed), once per takeover generation. As the new owner's rManager: every member is asked what it
// keeps, the longest prefix of surviving logical blocks is chosen, and its holders hand it over, all or none.
#include <algorithm>
#include <map>
#include <memory>
#include <set>

#include <fmt/format.h>

#include "actors/rmanager/state.hpp"

namespace illm::actors::rmanager_impl {

namespace {

/// Requests remembered per holder with the generation they were adopted for (the oldest are forgotten first).
constexpr size_t adoptions_kept = 4096;

/// A departed owner's request kept here, at the end of its lease, is freed unless a new owner took it over.
void expire_orphan(self_ptr self, instance_id owner, request_id req) {
  auto& st = self->state;
  if (!st.orphans.erase({owner, req})) return;
  release_hosted(self, release_blocks{req, owner});
  plane_log(st, fmt::format("rmanager {}: no new owner took request {} of instance {} over: its blocks here are freed",
                            st.config.id, req, owner));
}

orphan_adopted refused(const rmanager_state& st, const adopt_orphan& a, const std::string& why) {
  return {false, fmt::format("instance {} cannot hand request {} to instance {}: {}", st.config.id, a.req_id, a.new_owner, why),
          {}};
}

/// Checks the takeover generation of `a` against the one adopted here before: none when it may go on.
std::optional<orphan_adopted> fenced(const rmanager_state& st, const adopt_orphan& a) {
  auto seen = st.adoptions.find(a.req_id);
  if (seen == st.adoptions.end()) return std::nullopt;
  if (a.generation == seen->second.generation && a.new_owner == seen->second.owner) return seen->second.answer;
  if (a.generation > seen->second.generation) return std::nullopt;
  return refused(st, a, fmt::format("generation {} is not newer than {}, adopted by instance {}", a.generation,
                                    seen->second.generation, seen->second.owner));
}

/// Hands the checked blocks over: everything else of (old owner, req) here is freed, the kept blocks belong to
/// the new owner (hosted for it, or its own when it is this instance).
orphan_adopted hand_over(self_ptr self, const adopt_orphan& a, const std::vector<uint32_t>& kept,
                         const std::vector<uint32_t>& promoted) {
  auto& st = self->state;
  std::vector<uint32_t> logical = a.keep, physical = kept;
  logical.insert(logical.end(), a.promote.begin(), a.promote.end());
  physical.insert(physical.end(), promoted.begin(), promoted.end());
  const std::set<uint32_t> keeping(physical.begin(), physical.end());
  for (uint32_t b : st.config.hosted->remove_request(a.old_owner, a.req_id))
    if (!keeping.count(b)) free_block(st, b);
  release_hosted(self, release_blocks{a.req_id, a.old_owner});  // copies not promoted, promises, chunks
  std::vector<uint32_t> owned;  // the prefix cache's blocks stay its own: the new owner reads them in its place
  for (uint32_t b : physical)
    if (!st.config.prefix_cache || st.config.prefix_cache->readers(b) == 0) owned.push_back(b);
  if (!st.config.pool->set_owner(owned, gpu::block_owner{a.req_id, a.new_owner}))
    return refused(st, a, "a kept block is not in use");
  if (a.new_owner != st.config.id && !physical.empty()) st.config.hosted->add(a.new_owner, a.req_id, logical, physical);
  return {true, {}, std::move(physical)};
}

}  // namespace

void keep_orphans(self_ptr self, instance_id owner, const std::set<request_id>& requests) {
  auto& st = self->state;
  for (request_id req : requests) {
    if (st.config.orphan_lease.count() == 0) {
      release_hosted(self, release_blocks{req, owner});
      continue;
    }
    if (st.orphans.insert({owner, req}).second)
      defer(self, st.config.orphan_lease, [self, owner, req] { expire_orphan(self, owner, req); });
  }
  if (!requests.empty())
    plane_log(st, fmt::format("rmanager {}: instance {} is gone: what was kept here for its {} request(s) {}", st.config.id,
                              owner, requests.size(),
                              st.config.orphan_lease.count() ? fmt::format("waits {} ms for a new owner",
                                                                           st.config.orphan_lease.count())
                                                             : std::string("is freed")));
}

orphan_report report(self_ptr self, const report_orphan& r) {
  const auto& st = self->state;
  orphan_report out;
  for (const auto& [logical, physical] : st.config.hosted->logical_map(r.owner, r.req_id)) out.primary.push_back(logical);
  out.copies = copies_kept(st, r.owner, r.req_id);
  out.room = st.config.promises->of(r.owner, r.req_id) > 0;
  return out;
}

orphan_adopted adopt(self_ptr self, const adopt_orphan& a) {
  auto& st = self->state;
  if (auto answer = fenced(st, a)) return *answer;
  const std::map<uint32_t, uint32_t> primaries = st.config.hosted->logical_map(a.old_owner, a.req_id);
  std::vector<uint32_t> kept;
  for (uint32_t l : a.keep) {
    auto found = primaries.find(l);
    if (found == primaries.end()) return refused(st, a, fmt::format("it keeps no block {} of it", l));
    kept.push_back(found->second);
  }
  std::vector<uint32_t> promoted;
  if (!a.promote.empty()) {
    replicas_promoted p = promote_here(self, promote_replicas{a.req_id, a.old_owner, a.promote, {}});
    if (!p.ok) return refused(st, a, p.reason);
    promoted = std::move(p.blocks);
  }
  orphan_adopted out = hand_over(self, a, kept, promoted);
  st.orphans.erase({a.old_owner, a.req_id});
  st.adoptions[a.req_id] = {a.generation, a.new_owner, out};
  if (st.adoptions.size() > adoptions_kept) st.adoptions.erase(st.adoptions.begin());
  return out;
}

namespace {

/// A takeover under way at the new owner's rManager: the members' reports, then their hand-overs.
struct takeover_run {
  caf::typed_response_promise<taken_over> answer;
  take_over ask;
  std::map<instance_id, orphan_report> reports;
  std::map<instance_id, adopt_orphan> plan;  ///< what each holder is asked to hand over
  std::map<instance_id, orphan_adopted> handed;
  size_t left = 0;
  std::vector<instance_id> prefix;  ///< the holder of each logical block of the prefix
};
using run_ptr = std::shared_ptr<takeover_run>;

/// The longest prefix of logical blocks that survived (a primary, else a copy), and what each holder hands over.
void choose(self_ptr self, takeover_run& run) {
  std::map<uint32_t, instance_id> primary_at, copy_at;
  for (const auto& [holder, r] : run.reports) {
    for (uint32_t l : r.primary) primary_at.emplace(l, holder);
    for (uint32_t l : r.copies) copy_at.emplace(l, holder);
  }
  for (const auto& [holder, r] : run.reports)  // everyone who keeps anything frees what is not taken
    if (!r.primary.empty() || !r.copies.empty() || r.room)
      run.plan[holder] = {run.ask.req_id, run.ask.old_owner, self->state.config.id, run.ask.generation, {}, {}};
  for (uint32_t l = 0; l < run.ask.max_blocks; ++l) {
    if (auto p = primary_at.find(l); p != primary_at.end()) {
      run.plan[p->second].keep.push_back(l);
      run.prefix.push_back(p->second);
    } else if (auto c = copy_at.find(l); c != copy_at.end()) {
      run.plan[c->second].promote.push_back(l);
      run.prefix.push_back(c->second);
    } else {
      break;
    }
  }
}

/// Where logical block `l` is in a holder's answer to `a`: its keeps, then its promotions.
size_t place_in(const adopt_orphan& a, uint32_t l) {
  auto k = std::find(a.keep.begin(), a.keep.end(), l);
  if (k != a.keep.end()) return size_t(k - a.keep.begin());
  return a.keep.size() + size_t(std::find(a.promote.begin(), a.promote.end(), l) - a.promote.begin());
}

/// Every holder answered its hand-over: the new owner's table prefix, or (one refused) nothing, and what was
/// handed over goes back.
void finish_takeover(self_ptr self, const run_ptr& run) {
  auto& st = self->state;
  taken_over out;
  for (const auto& [holder, h] : run->handed) {
    const adopt_orphan& asked = run->plan.at(holder);
    if (out.reason.empty() && !h.ok) out.reason = h.reason;
    if (out.reason.empty() && h.physical.size() != asked.keep.size() + asked.promote.size())
      out.reason = fmt::format("instance {} handed over {} blocks for {}", holder, h.physical.size(),
                               asked.keep.size() + asked.promote.size());
  }
  if (!out.reason.empty()) {
    for (const auto& [holder, h] : run->handed) {
      if (!h.ok || h.physical.empty()) continue;
      if (holder == st.config.id) {
        for (uint32_t b : h.physical) free_block(st, b);
      } else if (auto peer = rmanager_of(self, holder)) {
        self->send(*peer, release_blocks{run->ask.req_id, st.config.id});
      }
    }
    plane_log(st, fmt::format("rmanager {}: request {} of instance {} is computed again: {}", st.config.id,
                              run->ask.req_id, run->ask.old_owner, out.reason));
    run->answer.deliver(std::move(out));
    return;
  }
  std::map<instance_id, uint32_t> per_holder;
  for (uint32_t l = 0; l < run->prefix.size(); ++l) {
    const instance_id holder = run->prefix[l];
    out.holders.push_back(holder);
    out.physical.push_back(run->handed.at(holder).physical.at(place_in(run->plan.at(holder), l)));
    ++per_holder[holder];
  }
  for (const auto& [holder, a] : run->plan) out.promoted += uint32_t(a.promote.size());
  for (const auto& [holder, n] : per_holder)
    if (holder != st.config.id) note_placed(st, run->ask.req_id, holder, n);
  plane_log(st, fmt::format("rmanager {}: took request {} of instance {} over: {} block(s) survived at {} holder(s)",
                            st.config.id, run->ask.req_id, run->ask.old_owner, out.holders.size(), per_holder.size()));
  run->answer.deliver(std::move(out));
}

/// Asks each holder of the plan to hand its part over.
void hand_overs(self_ptr self, const run_ptr& run) {
  if (run->plan.empty()) return finish_takeover(self, run);
  run->left = run->plan.size();
  for (const auto& [holder, a] : run->plan) {
    auto done = [self, run, holder](orphan_adopted h) {
      run->handed[holder] = std::move(h);
      if (--run->left == 0) finish_takeover(self, run);
    };
    auto peer = rmanager_of(self, holder);
    if (holder == self->state.config.id || !peer) {
      done(peer ? adopt(self, a) : orphan_adopted{false, fmt::format("instance {} is unknown", holder), {}});
      continue;
    }
    self->request(*peer, self->state.config.answer_timeout, a)
        .then(done, [done, holder](const caf::error&) {
          done(orphan_adopted{false, fmt::format("instance {} did not answer the takeover", holder), {}});
        });
  }
}

}  // namespace

caf::result<taken_over> take_over_request(self_ptr self, const take_over& t) {
  auto& st = self->state;
  auto run = std::make_shared<takeover_run>();
  run->answer = self->make_response_promise<taken_over>();
  run->ask = t;
  std::set<instance_id> members{st.config.id};
  for (const auto& [id, rm] : st.member_rmanagers) members.insert(id);
  members.erase(t.old_owner);
  run->left = members.size();
  auto reported = [self, run](instance_id holder, orphan_report r) {
    run->reports[holder] = std::move(r);
    if (--run->left > 0) return;
    choose(self, *run);
    hand_overs(self, run);
  };
  for (instance_id id : members) {
    const report_orphan ask{t.req_id, t.old_owner};
    auto peer = rmanager_of(self, id);
    if (id == st.config.id || !peer) {
      reported(id, peer ? report(self, ask) : orphan_report{});
      continue;
    }
    self->request(*peer, st.config.answer_timeout, ask)
        .then([reported, id](orphan_report& r) { reported(id, std::move(r)); },
              [reported, id](const caf::error&) { reported(id, orphan_report{}); });
  }
  return run->answer;
}

}  // namespace illm::actors::rmanager_impl
