// The gManager link: a round of attempts reaches every address of the list at once (CAF's middleman connects,
// then the gManager is asked its view for its epoch); the highest epoch that answered wins. Unlinked, a failed
// round is tried again after a backoff that doubles up to its maximum; linked, the other addresses are asked
// every probe period, and a gManager of a higher epoch is followed.
#include "actors/cluster/gmanager_link.hpp"

#include "actors/cluster/control_security.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <set>

#include <caf/io/all.hpp>
#include <fmt/format.h>

namespace illm::actors {

namespace {

/// A gManager that answered in a round.
struct candidate {
  gmanager_actor gmanager;
  control_endpoint at;
  uint64_t epoch = 0;
};

/// One round of attempts: what is still pending, the best answer, what failed.
struct round {
  size_t pending = 0;
  std::optional<candidate> best;
  std::vector<std::string> errors;
};

struct link_state {
  gmanager_link_config config;
  std::optional<candidate> linked;
  std::shared_ptr<round> attempt;  ///< the round in progress; null: none
  std::chrono::milliseconds backoff{0};
  static inline const char* name = "gmanager_link";
};

using self_ptr = gmanager_link_actor::stateful_pointer<link_state>;

void schedule(self_ptr self, std::chrono::milliseconds after) {
  self->delayed_send(self, after, liveness_tick_atom::value);
}

/// Links to `c`: monitored from now on, and told.
void link_to(self_ptr self, candidate c) {
  auto& st = self->state;
  if (st.linked) self->demonitor(st.linked->gmanager.address());
  self->monitor(c.gmanager);
  st.linked = c;
  st.backoff = st.config.min_backoff;
  if (st.config.on_linked) st.config.on_linked(c.gmanager, c.at, c.epoch);
}

/// A round ended: link to the best answer if it is better than the link, else wait and try again.
void finish_round(self_ptr self) {
  auto& st = self->state;
  std::shared_ptr<round> r = std::move(st.attempt);
  if (r->best && (!st.linked || r->best->epoch > st.linked->epoch)) link_to(self, *r->best);
  if (st.linked) {
    if (st.config.addresses.size() > 1) schedule(self, st.config.probe_period);
    return;
  }
  if (st.config.on_failed_round) st.config.on_failed_round(fmt::format("{}", fmt::join(r->errors, "; ")));
  schedule(self, st.backoff);
  st.backoff = std::min(st.config.max_backoff, st.backoff * 2);
}

void settle_one(self_ptr self, const std::shared_ptr<round>& r) {
  if (--r->pending == 0 && self->state.attempt == r) finish_round(self);
}

/// Reaches the gManager at `at` and asks its epoch; the answer goes to round `r`.
void attempt(self_ptr self, const std::shared_ptr<round>& r, const control_endpoint& at) {
  const auto timeout = self->state.config.answer_timeout;
  auto fail = [=](const std::string& why) {
    r->errors.push_back(fmt::format("{}: {}", to_string(at), why));
    settle_one(self, r);
  };
  self->request(control_connector(self->system()), timeout, caf::connect_atom::value, at.host, at.port)
      .then(
          [=](const caf::node_id&, caf::strong_actor_ptr& ptr, const std::set<std::string>&) {
            if (!ptr) return fail("nothing is published there");
            auto gm = caf::actor_cast<gmanager_actor>(std::move(ptr));
            self->request(gm, timeout, view_atom::value)
                .then(
                    [=](const cluster_view& v) {
                      if (!r->best || v.epoch > r->best->epoch) r->best = candidate{gm, at, v.epoch};
                      settle_one(self, r);
                    },
                    [=](const caf::error& e) { fail("no answer: " + self->system().render(e)); });
          },
          [=](const caf::error& e) {
            if (refused_by_peer(e) && self->state.config.on_refused) self->state.config.on_refused();
            fail(self->system().render(e));
          });
}

/// Starts a round over every address but the linked one's.
void start_round(self_ptr self) {
  auto& st = self->state;
  if (st.attempt) return;
  auto r = std::make_shared<round>();
  std::vector<control_endpoint> targets;
  for (const control_endpoint& at : st.config.addresses)
    if (!st.linked || !(at == st.linked->at)) targets.push_back(at);
  r->pending = targets.size();
  st.attempt = r;
  if (targets.empty()) return finish_round(self);
  for (const control_endpoint& at : targets) attempt(self, r, at);
}

gmanager_link_actor::behavior_type link_behavior(self_ptr self, gmanager_link_config config) {
  self->state.config = std::move(config);
  self->state.backoff = self->state.config.min_backoff;
  self->set_down_handler([=](const caf::down_msg& d) {
    auto& st = self->state;
    if (!st.linked || d.source != st.linked->gmanager.address()) return;
    st.linked.reset();
    if (st.config.on_lost) st.config.on_lost(self->system().render(d.reason));
    schedule(self, st.config.min_backoff);
  });
  self->send(self, liveness_tick_atom::value);
  return {
      [=](liveness_tick_atom) { start_round(self); },
  };
}

}  // namespace

gmanager_link_actor spawn_gmanager_link(caf::actor_system& sys, gmanager_link_config config) {
  return sys.spawn<caf::hidden>(link_behavior, std::move(config));
}

std::string to_string(const control_endpoint& e) { return fmt::format("{}:{}", e.host, e.port); }

}  // namespace illm::actors
