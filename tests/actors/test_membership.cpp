// The gManager's membership reports on CAF's deterministic scheduler: joined once per instance, draining,
// left, and down when a monitored rManager dies, with the requests it owned (its placement map) and the
// requests of others that had blocks hosted on it, so that none is lost track of.
#include <algorithm>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <doctest/doctest.h>

#include "actors/gmanager.hpp"

using namespace illm::actors;
using namespace std::chrono_literals;

namespace {

struct membership_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  std::shared_ptr<std::vector<membership_event>> events = std::make_shared<std::vector<membership_event>>();
  caf::actor gmanager;

  membership_fixture() {
    register_messages(cfg);
    cfg.set("scheduler.policy", caf::atom("testing"));
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
    gmanager_config g;
    g.policy_period = 10ms;
    g.on_membership = [ev = events](const membership_event& e) { ev->push_back(e); };
    gmanager = spawn_gmanager(*sys, g);
    sched->run();
  }
  ~membership_fixture() {
    caf::anon_send_exit(gmanager, caf::exit_reason::user_shutdown);
    sched->run();
  }

  /// A stand-in rManager: an actor that answers nothing; the gManager monitors it.
  caf::actor member() {
    return sys->spawn([](caf::event_based_actor*) -> caf::behavior {
      return {[](const cluster_view&) {}, [](const drain_instance&) {}};
    });
  }

  void from(const caf::actor& who, caf::message m) {
    caf::send_as(who, gmanager, std::move(m));
    sched->run();
  }

  size_t count(membership_event::kind k, instance_id id) const {
    return size_t(std::count_if(events->begin(), events->end(),
                                [&](const auto& e) { return e.what == k && e.inst_id == id; }));
  }
};

}  // namespace

TEST_SUITE("membership") {
  TEST_CASE("a dead rManager is reported down with the requests it owned and the blocks it hosted") {
    membership_fixture f;
    caf::actor a = f.member(), b = f.member();
    f.from(a, caf::make_message(join_cluster{1, a, {}, {}, {}}));
    f.from(a, caf::make_message(join_cluster{1, a, {}, {}, {}}));  // joins again with its instance: one report
    f.from(b, caf::make_message(join_cluster{2, b, {}, {}, {}}));
    CHECK(f.count(membership_event::kind::joined, 1) == 1);
    CHECK(f.count(membership_event::kind::joined, 2) == 1);
    // Instance 1 owns requests 7 (local, and lent to 2) and 8; instance 2 owns 9, with blocks hosted on 1.
    f.from(a, caf::make_message(heartbeat{1, 1, {}, {{7, 1, 3, true}, {7, 2, 2, false}, {8, 1, 1, true}}}));
    f.from(b, caf::make_message(heartbeat{2, 1, {}, {{9, 2, 4, true}, {9, 1, 2, false}}}));
    caf::anon_send_exit(a, caf::exit_reason::kill);
    f.sched->run();
    REQUIRE(f.count(membership_event::kind::down, 1) == 1);
    const membership_event& down = f.events->back();
    CHECK(down.lost_requests == std::vector<request_id>{7, 8});
    CHECK(down.lost_hosted == std::vector<request_id>{9});
    CHECK_FALSE(down.reason.empty());
    // Drain and leave: reported once each, and a later death of a member that left reports nothing.
    f.from(b, caf::make_message(drain_instance{2}));
    f.from(b, caf::make_message(drain_instance{2}));
    f.from(b, caf::make_message(leave_cluster{2}));
    CHECK(f.count(membership_event::kind::draining, 2) == 1);
    CHECK(f.count(membership_event::kind::left, 2) == 1);
    caf::anon_send_exit(b, caf::exit_reason::kill);
    f.sched->run();
    CHECK(f.count(membership_event::kind::down, 2) == 0);
    CHECK(std::string(to_string(membership_event::kind::down)) == "down");
  }
}
