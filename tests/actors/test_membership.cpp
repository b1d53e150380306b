// The gManager's membership reports on CAF's deterministic scheduler: joined once per instance, draining,
// left, and down when a monitored rManager dies, with the requests it owned (its placement map) and the
// requests of others that had blocks hosted on it, so that none is lost track of. And what a request
// actor does when its instance leaves: it goes on on another from its prompt and tokens, or ends clearly.
#include <algorithm>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <doctest/doctest.h>

#include "actors/cluster/request_router.hpp"
#include "actors/gmanager.hpp"
#include "actors/request.hpp"
#include "gpu/sampler.hpp"

using namespace illm::actors;
using namespace std::chrono_literals;

namespace {

struct membership_fixture {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  std::shared_ptr<std::vector<membership_event>> events = std::make_shared<std::vector<membership_event>>();
  gmanager_actor gmanager;

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

  /// A gManager that starts afresh in place of the one before (its index empty, the members unchanged).
  void restart_gmanager() {
    caf::anon_send_exit(gmanager, caf::exit_reason::kill);
    sched->run();
    gmanager_config g;
    g.policy_period = 10ms;
    gmanager = spawn_gmanager(*sys, g);
    sched->run();
  }

  /// A stand-in rManager: an actor that answers nothing; the gManager monitors it.
  caf::actor member() {
    return sys->spawn([](caf::event_based_actor*) -> caf::behavior {
      return {[](const cluster_view&) {}, [](const drain_instance&) {}};
    });
  }

  template <class Message>
  void from(const caf::actor& who, Message m) {
    caf::send_as(who, gmanager, std::move(m));
    sched->run();
  }

  /// The gManager's answer of type Answer to `question`, once the scheduler has run it.
  template <class Answer, class Question>
  Answer ask(Question question) {
    auto out = std::make_shared<Answer>();
    sys->spawn([out, question, gm = gmanager](caf::event_based_actor* self) {
      self->request(gm, caf::infinite, question).then([out](Answer& a) { *out = std::move(a); });
    });
    sched->run();
    return std::move(*out);
  }

  /// The gManager's status now.
  cluster_status status() { return ask<cluster_status>(status_atom::value); }

  /// The gManager's view now.
  cluster_view view() { return ask<cluster_view>(view_atom::value); }

  /// The members holding a chain of keys, by the gManager's prefix index: (member, blocks) pairs.
  std::vector<std::pair<instance_id, uint32_t>> holders(std::vector<illm::gpu::block_key> keys) {
    const auto found = ask<prefix_holders>(prefix_lookup{std::move(keys)});
    std::vector<std::pair<instance_id, uint32_t>> pairs;
    for (size_t i = 0; i < found.holders.size(); ++i) pairs.push_back({found.holders[i], found.blocks[i]});
    last_cover = found.cover;
    return pairs;
  }
  std::vector<illm::actors::placement::prefix_segment> last_cover;  ///< of the last holders() asked

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
    f.from(a, join_cluster{1, caf::actor_cast<rmanager_actor>(a), {}, {}, {}, {}});
    f.from(a, join_cluster{1, caf::actor_cast<rmanager_actor>(a), {}, {}, {}, {}});  // joins again with its instance: one report
    f.from(b, join_cluster{2, caf::actor_cast<rmanager_actor>(b), {}, {}, {}, {}});
    CHECK(f.count(membership_event::kind::joined, 1) == 1);
    CHECK(f.count(membership_event::kind::joined, 2) == 1);
    // Instance 1 owns requests 7 (local, and lent to 2) and 8; instance 2 owns 9, with blocks hosted on 1.
    f.from(a, heartbeat{1, 1, {}, {{7, 1, 3, true}, {7, 2, 2, false}, {8, 1, 1, true}}});
    f.from(b, heartbeat{2, 1, {}, {{9, 2, 4, true}, {9, 1, 2, false}}});
    caf::anon_send_exit(a, caf::exit_reason::kill);
    f.sched->run();
    REQUIRE(f.count(membership_event::kind::down, 1) == 1);
    const membership_event& down = f.events->back();
    CHECK(down.lost_requests == std::vector<request_id>{7, 8});
    CHECK(down.lost_hosted == std::vector<request_id>{9});
    CHECK_FALSE(down.reason.empty());
    // Drain and leave: reported once each, and a later death of a member that left reports nothing.
    f.from(b, drain_instance{2});
    f.from(b, drain_instance{2});
    f.from(b, leave_cluster{2});
    CHECK(f.count(membership_event::kind::draining, 2) == 1);
    CHECK(f.count(membership_event::kind::left, 2) == 1);
    caf::anon_send_exit(b, caf::exit_reason::kill);
    f.sched->run();
    CHECK(f.count(membership_event::kind::down, 2) == 0);
    CHECK(std::string(to_string(membership_event::kind::down)) == "down");
  }

  TEST_CASE("the prefix index follows the members' reports, asks for every key after a missed one, and is rebuilt after a restart") {
    using illm::gpu::block_key;
    using illm::gpu::prefix_changes;
    membership_fixture f;
    caf::actor a = f.member(), b = f.member();
    const block_key k1{1, 1}, k2{2, 2}, k3{3, 3}, k4{4, 4};
    auto resync = [&](instance_id id) {
      const cluster_view v = f.view();
      const instance_view* i = v.find(id);
      return i && i->cache_resync;
    };
    f.from(a, join_cluster{1, caf::actor_cast<rmanager_actor>(a), {}, {}, {}, {}});
    f.from(b, join_cluster{2, caf::actor_cast<rmanager_actor>(b), {}, {}, {}, {}});
    f.from(a, heartbeat{1, 1, {}, {}, prefix_changes{false, {k1, k2, k3}, {}}, 0});
    f.from(b, heartbeat{2, 1, {}, {}, prefix_changes{false, {k1, k4}, {}}, 0});
    using holders = std::vector<std::pair<instance_id, uint32_t>>;
    using illm::actors::placement::prefix_segment;
    CHECK(f.holders({k1, k2, k3, k4}) == holders{{1, 3}, {2, 1}});
    // Between them they hold all four: instance 1 the first three, instance 2 the fourth.
    CHECK(f.last_cover == std::vector<prefix_segment>{{1, 0, 3}, {2, 3, 1}});
    CHECK(f.holders({k2, k3}) == holders{{1, 2}});
    f.from(a, heartbeat{1, 2, {}, {}, prefix_changes{false, {}, {k3}}, 1});
    CHECK(f.holders({k1, k2, k3}) == holders{{1, 2}, {2, 1}});
    // Heartbeat 3 of instance 1 was lost: its keys leave the index until it reports them all.
    f.from(a, heartbeat{1, 4, {}, {}, prefix_changes{false, {k4}, {}}, 3});
    CHECK(resync(1));
    CHECK_FALSE(resync(2));
    CHECK(f.holders({k1, k2}) == holders{{2, 1}});
    f.from(a, heartbeat{1, 5, {}, {}, prefix_changes{true, {k1, k2, k4}, {}}, 4});
    CHECK_FALSE(resync(1));
    CHECK(f.holders({k1, k2}) == holders{{1, 2}, {2, 1}});
    // A member that leaves takes its keys along.
    f.from(b, leave_cluster{2});
    CHECK(f.holders({k1}) == holders{{1, 1}});
    // A gManager that starts afresh asks for every key and answers from the full reports.
    f.restart_gmanager();
    f.from(a, join_cluster{1, caf::actor_cast<rmanager_actor>(a), {}, {}, {}, {}});
    f.from(a, heartbeat{1, 6, {}, {}, prefix_changes{false, {}, {}}, 5});
    CHECK(resync(1));
    CHECK(f.holders({k1, k2}).empty());
    f.from(a, heartbeat{1, 7, {}, {}, prefix_changes{true, {k1, k2, k4}, {}}, 6});
    CHECK(f.holders({k1, k2, k4}) == holders{{1, 3}});
    CHECK_FALSE(resync(1));
  }

  TEST_CASE("a new request goes where it costs least: the work running and queued there, and the prompt it computes") {
    caf::actor_system_config cfg;
    caf::actor_system sys{cfg};
    auto any_instance = caf::actor_cast<instance_actor>(sys.spawn([] { return caf::behavior{[](int) {}}; }));
    // Two instances of 100 blocks with `used` blocks in use or spoken for each.
    auto view = [&](uint32_t used0, uint32_t used1, bool shared) {
      cluster_view v;
      for (auto [id, used] : {std::pair{0u, used0}, std::pair{1u, used1}}) {
        instance_view i;
        i.inst_id = id;
        i.total_blocks = 100;
        i.free_blocks = 100 - used;
        i.instance = any_instance;
        i.cache_shared = shared;
        v.instances.push_back(i);
      }
      return v;
    };
    auto to = [](const cluster_view& v, uint32_t prompt_blocks, prefix_hits hits) {
      return cheapest_instance(v, prompt_blocks, hits)->inst_id;
    };
    // No hits: the most free, caches or not.
    CHECK(to(view(10, 40, false), 30, {}) == 0);
    CHECK(to(view(40, 10, true), 30, {}) == 1);
    // Per-instance caches: instance 1 holding 25 of 30 blocks costs 40 + 5, instance 0 costs 10 + 30: still 0; holding
    // 59 of 60 it costs 40 + 1 against 10 + 60: 1.
    CHECK(to(view(10, 40, false), 30, {{1, 25}}) == 0);
    CHECK(to(view(10, 40, false), 60, {{1, 59}}) == 1);
    // A cluster-wide cache: instance 0 reads the 59 blocks at instance 1 (10 + 1 + 59/4) rather than wait behind its
    // load (40 + 1); with loads close, the holder runs it (15 + 1 against 10 + 1 + 59/4).
    CHECK(to(view(10, 40, true), 60, {{1, 59}}) == 0);
    CHECK(to(view(10, 15, true), 60, {{1, 59}}) == 1);
    // Queued work counts: the holder of the prefix with 100 blocks of requests waiting in its queue (a batch at its
    // limit, the pool free) loses to the idle instance; so does one that this router sent 50 blocks of requests to
    // that the view (a heartbeat old) does not show yet.
    cluster_view queued = view(10, 10, true);
    queued.instances[1].waiting_blocks = 100;
    CHECK(to(queued, 60, {{1, 59}}) == 0);
    CHECK(to(queued, 30, {}) == 0);
    CHECK(cheapest_instance(view(10, 20, false), 30, {}, 0, {{0, 50}})->inst_id == 1);
    CHECK(cheapest_instance(view(10, 20, false), 30, {}, 0, {{0, 15}})->inst_id == 0);
    caf::anon_send_exit(any_instance, caf::exit_reason::user_shutdown);
  }

  TEST_CASE("the status shows each member's pool and state, each request's holders, moves, and members gone") {
    membership_fixture f;
    caf::actor a = f.member(), b = f.member();
    f.from(a, join_cluster{1, caf::actor_cast<rmanager_actor>(a), {}, {}, {}, {}});
    f.from(b, join_cluster{2, caf::actor_cast<rmanager_actor>(b), {}, {}, {}, {}});
    instance_stats one{64, 20, 0, 6, 1, 0, 0, false, 0, 30, 8};
    f.from(a, heartbeat{1, 1, one, {{7, 1, 30, true}, {7, 2, 6, false}}});
    f.from(b, heartbeat{2, 1, {64, 58, 6, 0, 0, 0, 0, false, 0, 0, 0}, {}});
    f.from(a, move_report{11, 7, 1, 2, 6, true, false, "", false});
    f.from(a, move_report{12, 7, 1, 2, 4, false, false, "no room", false});
    const uint64_t before = f.status().version;
    f.from(b, drain_instance{2});
    cluster_status s = f.status();
    CHECK(s.version > before);
    REQUIRE(s.members.size() == 2);
    CHECK(s.members[0].inst_id == 1);
    CHECK(s.members[0].state == "alive");
    CHECK(s.members[0].stats.owned_blocks == 30);
    CHECK(s.members[0].stats.promised_blocks == 8);
    CHECK(s.members[1].state == "draining");
    CHECK(s.members[1].stats.hosted_blocks == 6);
    REQUIRE(s.requests.size() == 1);
    CHECK(s.requests[0].req_id == 7);
    CHECK(s.requests[0].owner == 1);
    CHECK(s.requests[0].blocks.size() == 2);
    CHECK(s.moves.size() == 2);
    CHECK(s.moves_done == 1);
    CHECK(s.moves_refused == 1);
    CHECK(s.moves.back().reason == "no room");
    // A member that dies is shown down with why, one that leaves as left, each until it joins again.
    caf::anon_send_exit(a, caf::exit_reason::kill);
    f.sched->run();
    f.from(b, leave_cluster{2});
    s = f.status();
    REQUIRE(s.members.size() == 2);
    CHECK(s.members[0].inst_id == 1);
    CHECK(s.members[0].state == "down");
    CHECK_FALSE(s.members[0].reason.empty());
    CHECK(s.members[1].state == "left");
    CHECK(s.requests.empty());
    caf::actor c = f.member();
    f.from(c, join_cluster{1, caf::actor_cast<rmanager_actor>(c), {}, {}, {}, {}});
    s = f.status();
    REQUIRE(s.members.size() == 2);
    CHECK(s.members[0].state == "alive");
    CHECK(s.members[1].state == "left");
  }
}

namespace {

/// A stand-in instance: keeps the requests it is given.
instance_actor::behavior_type recording_instance(instance_actor::pointer,
                                                 std::shared_ptr<std::vector<generate_request>> got) {
  return {[got](const generate_request& r) { got->push_back(r); },
          [](const cancel_request&) {},
          [](const room_answer&) {},
          [](const loan_result&) {}, [](requeue_atom, request_id) {}, [](recheck_atom) {},
          [](const cluster_view&) {},
          [](const pick_blocks& p) { return block_pick{p.id, p.req_id, {}, {}}; },
          [](const blocks_moved&) { return false; },
          [](const move_abandoned&) {},
          [](const prefill_chunk& c) { return chunk_done{c.id, false, "a stand-in computes no chunk"}; },
          [](const cancel_chunk&) {},
          [](const chunk_started&) {},
          [](const pick_replicas& p) { return block_pick{p.id, 0, {}, {}, 0}; },
          [](const blocks_replicated&) { return false; },
          [](const replicas_lost&) {}};
}

/// What a request actor told its client.
struct client_log {
  std::vector<int32_t> tokens;
  std::vector<request_finished> ends;
  request_callbacks callbacks() {
    return {[this](int32_t t) { tokens.push_back(t); }, [this](const request_finished& e) { ends.push_back(e); }};
  }
};

/// A view of one instance, heard from lately, and of other members silent for a while.
cluster_view view_of(instance_id id, const instance_actor& instance, std::vector<instance_id> silent = {}) {
  cluster_view v;
  v.epoch = 5;
  v.instances.push_back({id, 64, 64, false, {}, instance, {}, 0});
  v.members = std::move(silent);
  v.members.push_back(id);
  return v;
}

}  // namespace

TEST_SUITE("membership") {
  TEST_CASE("a request whose instance left the cluster goes on on another from its prompt and its tokens") {
    membership_fixture f;
    auto at_a = std::make_shared<std::vector<generate_request>>();
    auto at_b = std::make_shared<std::vector<generate_request>>();
    instance_actor a = f.sys->spawn(recording_instance, at_a), b = f.sys->spawn(recording_instance, at_b);
    client_log client;
    caf::actor req =
        spawn_request(*f.sys, {7, {{1, 5, 9}, 6, 0.0f, 1.0f, 3, false}, {}}, {a, 1}, client.callbacks(), true);
    f.sched->run();
    REQUIRE(at_a->size() == 1);
    for (int32_t t : {11, 12}) caf::anon_send(req, token_event{7, t, 1});
    f.sched->run();
    caf::anon_send(req, view_of(1, a));  // its instance is still there: nothing changes
    caf::anon_send(req, view_of(2, b, {1}));  // nor while it is a member only silent for a while
    f.sched->run();
    CHECK(at_b->empty());
    caf::anon_send(req, view_of(2, b));
    f.sched->run();
    REQUIRE(at_b->size() == 1);
    CHECK(at_b->front().params.prompt == std::vector<int32_t>{1, 5, 9, 11, 12});
    CHECK(at_b->front().params.max_tokens == 4);
    CHECK(at_b->front().params.seed == illm::gpu::sampling_state_after(3, 2));  // its stream where it was
    CHECK(at_b->front().takeover_owner == 1);  // its new owner takes over what survived of it
    CHECK(at_b->front().takeover_generation == 1);
    caf::anon_send(req, token_event{7, 99, 1});  // the instance it left is not heard any more
    caf::anon_send(req, request_finished{7, "error", "late", 0, {}, 0, 0, 0, 1});
    caf::anon_send(req, token_event{7, 13, 2});
    caf::anon_send(req, request_finished{7, "length", {}, 0, {}, 1, 0, 0, 2});
    f.sched->run();
    CHECK(client.tokens == std::vector<int32_t>{11, 12, 13});
    REQUIRE(client.ends.size() == 1);
    CHECK(client.ends[0].reason == "length");
    CHECK(client.ends[0].preemptions == 1);
    CHECK(client.ends[0].generated == 3);
    for (auto& x : {a, b}) caf::anon_send_exit(x, caf::exit_reason::user_shutdown);
    f.sched->run();
  }

  TEST_CASE("a request whose instance left ends with an error without resuming, with none left, or with no view") {
    membership_fixture f;
    auto got = std::make_shared<std::vector<generate_request>>();
    instance_actor a = f.sys->spawn(recording_instance, got);
    client_log fixed, stranded, unheard;
    caf::actor r1 = spawn_request(*f.sys, {1, {{1, 2}, 4, 0.0f, 1.0f, 0, false}, {}}, {a, 1}, fixed.callbacks(), false);
    caf::actor r2 = spawn_request(*f.sys, {2, {{1, 2}, 4, 0.0f, 1.0f, 0, false}, {}}, {a, 1}, stranded.callbacks(), true);
    f.sched->run();
    for (auto& r : {r1, r2}) caf::anon_send(r, cluster_view{6, {}});
    f.sched->run();
    REQUIRE(fixed.ends.size() == 1);
    CHECK(fixed.ends[0].error.find("left the cluster") != std::string::npos);
    REQUIRE(stranded.ends.size() == 1);
    CHECK(stranded.ends[0].error.find("no other takes requests") != std::string::npos);
    // Its instance dies and no view comes: it waits a while for one, then ends.
    caf::actor r3 = spawn_request(*f.sys, {3, {{1, 2}, 4, 0.0f, 1.0f, 0, false}, {}}, {a, 1}, unheard.callbacks(), true);
    f.sched->run();
    caf::anon_send_exit(a, caf::exit_reason::kill);
    f.sched->run();
    CHECK(unheard.ends.empty());
    f.sched->clock().advance_time(std::chrono::seconds(10));
    f.sched->run();
    REQUIRE(unheard.ends.size() == 1);
    CHECK(unheard.ends[0].error.find("stopped") != std::string::npos);
  }
}
