// The paper's protocol on CAF's deterministic scheduler, message by message and on a virtual clock:
// refusals against stale views, first come first served reservations, leases that expire, duplicate
// and late messages, and moves that fail halfway, each leaving the blocks where they belong.
#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "actors/gmanager.hpp"
#include "actors/messages/requests.hpp"
#include "actors/rmanager/rmanager.hpp"
#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/prefix_cache.hpp"
#include "transport/inproc/inproc.hpp"

using namespace illm;
using namespace illm::actors;
using namespace std::chrono_literals;

namespace {

/// What a stand-in instance saw.
struct instance_log {
  std::map<request_id, std::vector<uint32_t>> blocks;  // request -> its local physical blocks, logical order
  std::vector<blocks_moved> switched;
  std::vector<move_abandoned> abandoned;
  std::vector<loan_result> loans;
  std::vector<room_answer> rooms;
  std::vector<move_id> chunks_cancelled;
  instance_id id = 0;
  std::optional<block_pick> offer;  // blocks it offers for a copy, once (no more than the rManager asks for)
  uint32_t offer_asked = 0;  // max_blocks of the pick_replicas that took the offer
  std::vector<blocks_replicated> replicated;
  std::vector<replicas_lost> lost;
};

/// A stand-in instance: picks its requests' blocks oldest first and records what the rManager tells it.
instance_actor::behavior_type fake_instance(instance_actor::pointer, std::shared_ptr<instance_log> log) {
  return {
      [log](const pick_blocks& ask) {
        block_pick out{ask.id, ask.req_id, {}, {}};
        const auto& blocks = log->blocks[ask.req_id];
        for (uint32_t i = 0; i < blocks.size() && out.logical.size() < ask.max_blocks; ++i) {
          out.logical.push_back(i);
          out.physical.push_back(blocks[i]);
        }
        return out;
      },
      [log](const blocks_moved& m) {
        log->switched.push_back(m);
        return true;
      },
      [log](const move_abandoned& m) { log->abandoned.push_back(m); },
      [log](const loan_result& r) { log->loans.push_back(r); }, [](requeue_atom, request_id) {}, [](recheck_atom) {},
      [log](const room_answer& a) { log->rooms.push_back(a); },
      [log](const cancel_chunk& c) { log->chunks_cancelled.push_back(c.id); },
      [](const cluster_view&) {},
      [](const generate_request&) {},
      [](const cancel_request&) {},
      [](const prefill_chunk& c) { return chunk_done{c.id, false, "a stand-in computes no chunk"}; },
      [](const chunk_started&) {},
      [log](const pick_replicas& ask) {
        if (log->offer) log->offer_asked = ask.max_blocks;
        block_pick out = log->offer.value_or(block_pick{});
        log->offer.reset();
        out.id = ask.id;
        out.logical.resize(std::min<size_t>(out.logical.size(), ask.max_blocks));
        out.physical.resize(out.logical.size());
        return out;
      },
      [log](const blocks_replicated& m) {
        log->replicated.push_back(m);
        return true;
      },
      [log](const replicas_lost& r) { log->lost.push_back(r); },
  };
}

/// A data plane whose puts can be held back or made to fail, around an in-process endpoint.
class controlled_plane final : public transport::data_plane {
 public:
  explicit controlled_plane(std::shared_ptr<transport::data_plane> inner) : inner_(std::move(inner)) {}
  transport::peer_id self() const override { return inner_->self(); }
  transport::result<transport::remote_region> register_memory(void* base, uint64_t bytes) override {
    return inner_->register_memory(base, bytes);
  }
  void put(transport::peer_id peer, const void* local, uint64_t bytes, const transport::remote_region& region,
           uint64_t address, transport::completion done) override {
    if (fail_puts_after >= 0 && puts_ >= fail_puts_after) return done({transport::status_code::io_error, "link down"});
    ++puts_;
    if (corrupt_puts) {  // the data arrives with one bit flipped
      auto damaged = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(local),
                                                            static_cast<const uint8_t*>(local) + bytes);
      (*damaged)[bytes / 2] ^= 0x10;
      return inner_->put(peer, damaged->data(), bytes, region, address,
                         [damaged, done](transport::status s) { done(std::move(s)); });
    }
    if (hold) {
      held.push_back([=, this] { inner_->put(peer, local, bytes, region, address, done); });
      return;
    }
    inner_->put(peer, local, bytes, region, address, std::move(done));
  }
  void flush(transport::peer_id peer, transport::completion done) override { inner_->flush(peer, std::move(done)); }
  void send(transport::peer_id peer, transport::channel ch, std::span<const uint8_t> payload,
            transport::completion done) override {
    inner_->send(peer, ch, payload, std::move(done));
  }
  void on_message(transport::channel ch, transport::message_handler h) override { inner_->on_message(ch, std::move(h)); }
  transport::traffic counters() const override { return inner_->counters(); }

  bool hold = false;         ///< keep puts until release_held()
  bool corrupt_puts = false;  ///< damage the data of every put
  int fail_puts_after = -1;  ///< fail every put after this many
  std::vector<std::function<void()>> held;
  void release_held() {
    for (auto& f : std::exchange(held, {})) f();
  }

 private:
  std::shared_ptr<transport::data_plane> inner_;
  int puts_ = 0;
};

/// Orders the moves a test queues, on the next policy tick.
struct scripted_orders {
  std::vector<placement::move_order> next;
  placement::policy policy() {
    return [this](const std::vector<placement::instance_snapshot>&) { return std::exchange(next, {}); };
  }
};

/// A gManager and n rManagers with small pools and stand-in instances on the test coordinator.
struct protocol_fixture {
  static constexpr uint32_t pool_blocks = 8;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  caf::scheduler::test_coordinator* sched = nullptr;
  gpu::cpu::cpu_backend device{1};
  std::shared_ptr<transport::inproc_fabric> fabric = std::make_shared<transport::inproc_fabric>();
  std::shared_ptr<event_log> events = std::make_shared<event_log>();
  scripted_orders orders;
  gmanager_actor gmanager;
  std::vector<std::shared_ptr<gpu::kv_pool>> pools;
  std::vector<std::shared_ptr<controlled_plane>> planes;
  std::vector<std::shared_ptr<instance_log>> logs;
  std::vector<std::shared_ptr<pool_promises>> promises;
  std::vector<std::shared_ptr<peer_nodes>> nodes;  ///< each rManager's members and nodes, as its views say
  std::vector<rmanager_actor> rmanagers;
  std::vector<instance_actor> instances;
  std::vector<std::shared_ptr<gpu::prefix_cache>> caches;  ///< each instance's (none without prefix_caches)

  uint32_t replica_min_tokens = 0;
  uint32_t peer_max_blocks = rmanager_config{}.peer_max_blocks;  ///< of the instances added from now on
  gpu::kv_identity kv;          ///< of the instances added from now on (the messages' default)
  bool prefix_caches = false;  ///< the instances added from now on keep a prefix cache

  /// `room_pass_limit`: the gManager's (how long younger, smaller rooms may go before a waiting one);
  /// `replica_min_tokens`: the rManagers' (0: no replicas).
  explicit protocol_fixture(int n, std::chrono::milliseconds room_pass_limit = 0ms, uint32_t replica_min_tokens = 0)
      : replica_min_tokens(replica_min_tokens) {
    register_messages(cfg);
    cfg.set("scheduler.policy", caf::atom("testing"));
    sys = std::make_unique<caf::actor_system>(cfg);
    sched = &dynamic_cast<caf::scheduler::test_coordinator&>(sys->scheduler());
    gmanager = spawn_gmanager(*sys, {10ms, orders.policy(), 1000ms, 10000ms, nullptr, {}, {}, room_pass_limit});
    for (int i = 0; i < n; ++i) add_instance(instance_id(i));
    settle();
  }

  ~protocol_fixture() {
    for (auto& a : rmanagers) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    for (auto& a : instances) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(gmanager, caf::exit_reason::user_shutdown);
    sched->run();
  }

  void add_instance(instance_id id) {
    auto pool = std::make_shared<gpu::kv_pool>(gpu::kv_pool::create(device, {1, 1, 4, gpu::dtype::f32}, pool_blocks).value());
    auto plane = std::make_shared<controlled_plane>(fabric->connect(id).value());
    auto region = plane->register_memory(pool->base(), uint64_t(pool_blocks) * pool->layout().block_bytes()).value();
    auto log = std::make_shared<instance_log>();
    rmanager_config rc;
    rc.id = id;
    rc.pool = pool;
    rc.hosted = std::make_shared<hosted_blocks>();
    rc.promises = std::make_shared<pool_promises>();
    promises.push_back(rc.promises);
    rc.plane = plane;
    rc.region = region;
    rc.gmanager = gmanager;
    rc.events = events;
    rc.heartbeat_period = 10ms;
    rc.lease = 100ms;
    rc.answer_timeout = 1000ms;
    rc.replica_min_tokens = replica_min_tokens;
    rc.orphan_lease = 500ms;
    rc.peer_max_blocks = peer_max_blocks;
    rc.nodes = std::make_shared<peer_nodes>();
    nodes.push_back(rc.nodes);
    rc.kv = kv;
    if (prefix_caches) rc.prefix_cache = gpu::prefix_cache::over(pool, id);
    caches.push_back(rc.prefix_cache);
    log->id = id;
    auto rm = spawn_rmanager(*sys, rc);
    auto inst = sys->spawn(fake_instance, log);
    caf::anon_send(rm, attach_atom::value, inst);
    pools.push_back(pool);
    planes.push_back(plane);
    logs.push_back(log);
    rmanagers.push_back(rm);
    instances.push_back(inst);
  }

  /// Checks that the one move reported failed with `why` in its reason, switched nothing, and left request 7
  /// reading its 4 blocks at instance 0.
  void check_move_failed(const std::string& why) {
    const auto moves = events->moves();
    REQUIRE(moves.size() == 1);
    CHECK_FALSE(moves[0].ok);
    CHECK(moves[0].reason.find(why) != std::string::npos);
    CHECK(logs[0]->switched.empty());
    CHECK(pools[0]->blocks_of(7) == 4);
  }

  /// Has the gManager order `order` (request, source, destination, blocks) on its next tick, then settles.
  void order_move(placement::move_order order) {
    orders.next.push_back(order);
    settle();
  }

  /// Delivers everything, then lets `d` of virtual time pass (timers, heartbeats), twice.
  void settle(caf::timespan d = 25ms) {
    for (int i = 0; i < 2; ++i) {
      sched->run();
      sched->clock().advance_time(d);
      sched->run();
    }
  }

  /// Gives request `req` of instance `inst` n local blocks (as a running request would have).
  void give_blocks(size_t inst, request_id req, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i)
      logs[inst]->blocks[req].push_back(pools[inst]->allocate({req, instance_id(inst)}).value());
  }

  /// Frees request `req`'s local blocks on instance `inst` (it ended) and tells the rManager, as the
  /// instance's next placement update would.
  void end_request(size_t inst, request_id req) {
    for (uint32_t b : logs[inst]->blocks[req]) (void)pools[inst]->release(b);
    logs[inst]->blocks.erase(req);
    caf::anon_send(rmanagers[inst], placement_update{});
  }

  /// Instance `owner` asks a room of `blocks` for its request `req`; the answer it hears.
  room_answer ask_room(size_t owner, request_id req, uint32_t blocks) {
    const size_t before = logs[owner]->rooms.size();
    caf::anon_send(rmanagers[owner], reserve_room{instance_id(owner), req, blocks});
    settle();
    REQUIRE(logs[owner]->rooms.size() == before + 1);
    return logs[owner]->rooms.back();
  }

  /// The gManager's view now.
  cluster_view view() {
    cluster_view out;
    auto gm = gmanager;
    sys->spawn([&out, gm](caf::event_based_actor* self) {
      self->request(gm, caf::infinite, view_atom::value).then([&out](cluster_view& v) { out = std::move(v); });
    });
    sched->run();
    return out;
  }

  /// The answer `to` gives to `message`, delivered on the coordinator (none: it gave none yet).
  template <class Answer, class Handle, class Message>
  std::optional<Answer> ask(const Handle& to, Message message) {
    auto out = std::make_shared<std::optional<Answer>>();
    sys->spawn([out, to, message](caf::event_based_actor* self) {
      self->request(to, caf::infinite, message).then([out](Answer& a) { *out = std::move(a); });
    });
    sched->run();
    return *out;
  }

  /// A chunk of request 5 of instance 0 in its room at instance 1, reserved by instance 0's rManager and taken
  /// by instance 1 to compute it (as the holder's instance does when the chunk arrives): its blocks there.
  std::vector<uint32_t> chunk_being_computed(move_id id, uint32_t blocks) {
    REQUIRE(ask_room(0, 5, blocks).granted);
    const auto reserved = ask<move_reservation>(rmanagers[0], reserve_chunk{id, 5, 1, blocks});
    REQUIRE(reserved);
    REQUIRE(reserved->granted);
    const auto taken = ask<std::vector<uint32_t>>(rmanagers[1], take_reservation{id, 0, 5});
    REQUIRE(taken);
    REQUIRE(*taken == reserved->blocks);
    for (uint32_t b : *taken) CHECK(pools[1]->layers_written(b) == 0);
    return *taken;
  }

  /// Instance `inst` in view `v`.
  static const instance_view& member(const cluster_view& v, instance_id inst) {
    auto it = std::find_if(v.instances.begin(), v.instances.end(), [&](const auto& i) { return i.inst_id == inst; });
    REQUIRE(it != v.instances.end());
    return *it;
  }
};

size_t count_ok(const std::vector<move_report>& moves) {
  return size_t(std::count_if(moves.begin(), moves.end(), [](const move_report& m) { return m.ok; }));
}

}  // namespace

TEST_SUITE("actors") {
  TEST_CASE("a message whose string claims more bytes than a message may carry is refused before it is sized") {
    std::vector<char> bytes;
    caf::binary_serializer sink{nullptr, bytes};
    size_t claimed = max_wire_bytes + 1;  // commit_result: id, committed, then the reason's length and no bytes
    REQUIRE_FALSE(sink(uint64_t(5), false));
    REQUIRE_FALSE(sink.begin_sequence(claimed));
    caf::binary_deserializer source{nullptr, bytes};
    commit_result r;
    const caf::error err = source(r);
    REQUIRE(err);
    CHECK(err == caf::sec::invalid_argument);  // CAF's own loading would size the string first, then hit the end
    commit_result ok{5, true, "fine"};
    std::vector<char> good;
    caf::binary_serializer good_sink{nullptr, good};
    REQUIRE_FALSE(good_sink(ok));
    caf::binary_deserializer good_source{nullptr, good};
    commit_result back;
    REQUIRE_FALSE(good_source(back));
    CHECK(back.reason == "fine");
    CHECK(back.ok);
  }

  TEST_CASE("a message number that is not finite is refused both ways instead of hanging CAF's float writer") {
    generate_params p;
    p.prompt = {1, 2};
    p.temperature = std::numeric_limits<float>::infinity();
    std::vector<char> out;
    caf::binary_serializer sink{nullptr, out};
    CHECK(sink(p) == caf::sec::invalid_argument);  // CAF 0.17's own float writer loops forever on an infinity
    std::vector<char> bytes;  // the same fields with the bits of an infinity where the temperature goes
    caf::binary_serializer raw{nullptr, bytes};
    REQUIRE_FALSE(raw(std::vector<int32_t>{1, 2}, int32_t(16), uint32_t(0x7f800000), 1.0f, uint64_t(0), false));
    caf::binary_deserializer source{nullptr, bytes};
    generate_params back;
    CHECK(source(back) == caf::sec::invalid_argument);
    p.temperature = 0.5f;
    std::vector<char> good;
    caf::binary_serializer good_sink{nullptr, good};
    REQUIRE_FALSE(good_sink(p));
    caf::binary_deserializer good_source{nullptr, good};
    REQUIRE_FALSE(good_source(back));
    CHECK(back.temperature == 0.5f);
  }

  TEST_CASE("a move copies the blocks then commits then switches the owner table") {
    protocol_fixture f(2);
    f.give_blocks(0, 7, 4);
    auto* src = static_cast<float*>(f.pools[0]->block_data(f.logs[0]->blocks[7][0]));
    src[0] = 42.0f;
    f.order_move({7, 0, 1, 3});
    REQUIRE(f.logs[0]->switched.size() == 1);
    const blocks_moved& m = f.logs[0]->switched[0];
    CHECK(m.logical == std::vector<uint32_t>{0, 1, 2});
    CHECK(f.pools[1]->blocks_of(7) == 3);
    CHECK(f.pools[1]->owner(m.dst_blocks[0]) == gpu::block_owner{7, 0});
    CHECK(static_cast<float*>(f.pools[1]->block_data(m.dst_blocks[0]))[0] == 42.0f);
    CHECK(count_ok(f.events->moves()) == 1);
  }

  TEST_CASE("try_move is refused when the destination filled up since the view and a later order succeeds") {
    protocol_fixture f(2);
    f.give_blocks(0, 7, 4);
    // Instance 1 fills up after the gManager's view last showed it empty.
    std::vector<uint32_t> taken;
    for (uint32_t i = 0; i < protocol_fixture::pool_blocks; ++i) taken.push_back(f.pools[1]->allocate({99, 1}).value());
    f.orders.next.push_back({7, 0, 1, 2});
    f.sched->run();
    f.sched->clock().advance_time(10ms);  // the policy tick sends the order
    f.sched->run();
    f.check_move_failed("refused");
    REQUIRE(f.logs[0]->abandoned.size() == 1);  // the request keeps reading its own blocks
    // Room again: the gManager's next instruction moves the blocks.
    for (uint32_t b : taken) REQUIRE(f.pools[1]->release(b).is_ok());
    f.order_move({7, 0, 1, 2});
    CHECK(count_ok(f.events->moves()) == 1);
    CHECK(f.pools[1]->blocks_of(7) == 2);
  }

  TEST_CASE("two sources racing for the last blocks: first come first served") {
    protocol_fixture f(3);
    f.give_blocks(0, 1, 6);
    f.give_blocks(2, 2, 6);
    for (uint32_t i = 0; i < protocol_fixture::pool_blocks - 4; ++i) (void)f.pools[1]->allocate({99, 1});
    f.orders.next = {{1, 0, 1, 4}, {2, 2, 1, 4}};  // both want instance 1's last 4 blocks
    f.settle();
    const auto moves = f.events->moves();
    REQUIRE(moves.size() == 2);
    CHECK(count_ok(moves) == 1);
    const move_report& refused = moves[0].ok ? moves[1] : moves[0];
    CHECK(refused.reason.find("4 blocks asked, 0 free") != std::string::npos);
    CHECK(f.pools[1]->free_blocks() == 0);
    CHECK(f.pools[1]->check().is_ok());
  }

  TEST_CASE("a reservation expires when the source never commits") {
    protocol_fixture f(2);
    f.give_blocks(0, 7, 4);
    f.planes[0]->hold = true;  // the copy never completes
    f.orders.next.push_back({7, 0, 1, 4});
    f.sched->run();
    f.sched->clock().advance_time(10ms);
    f.sched->run();
    CHECK(f.pools[1]->free_blocks() == protocol_fixture::pool_blocks - 4);  // reserved
    f.sched->clock().advance_time(150ms);  // past the lease
    f.sched->run();
    CHECK(f.pools[1]->free_blocks() == protocol_fixture::pool_blocks);  // given back
    // The copy finishes late: the commit is refused and the request stays on its blocks.
    f.planes[0]->hold = false;
    f.planes[0]->release_held();
    f.settle();
    f.check_move_failed("lease expired");
    CHECK(f.pools[1]->free_blocks() == protocol_fixture::pool_blocks);
  }

  TEST_CASE("a move that fails halfway leaves the request reading its old blocks") {
    protocol_fixture f(2);
    f.give_blocks(0, 7, 4);
    f.planes[0]->fail_puts_after = 2;  // the link drops after two of four blocks
    f.order_move({7, 0, 1, 4});
    f.check_move_failed("copy failed");
    REQUIRE(f.logs[0]->abandoned.size() == 1);
    CHECK(f.pools[1]->free_blocks() == protocol_fixture::pool_blocks);  // the reservation was aborted
  }

  TEST_CASE("a destination that dies mid-move fails the move and the request keeps reading its own blocks") {
    protocol_fixture f(2);
    f.give_blocks(0, 7, 4);
    f.planes[0]->hold = true;  // the puts are on the wire when the destination's process dies
    f.order_move({7, 0, 1, 4});
    REQUIRE(f.events->moves().empty());
    // What the process of instance 0 sees: its data plane's endpoint to 1 fails, and 1's actors are gone.
    caf::anon_send(f.rmanagers[0], peer_failed{1, "Endpoint timeout"});
    caf::anon_send_exit(f.rmanagers[1], caf::exit_reason::kill);
    f.sched->run();
    f.check_move_failed("data plane peer failed");
    REQUIRE(f.logs[0]->abandoned.size() == 1);  // the instance unmarks the blocks it picked
    CHECK(f.pools[0]->check().is_ok());
    f.planes[0]->release_held();  // late completions of the dead move change nothing
    f.settle();
    CHECK(f.events->moves().size() == 1);
    CHECK(f.pools[0]->blocks_of(7) == 4);
  }

  TEST_CASE("blocks that arrive damaged are not committed and the request keeps reading its own") {
    protocol_fixture f(2);
    f.give_blocks(0, 7, 4);
    f.planes[0]->corrupt_puts = true;
    f.order_move({7, 0, 1, 4});
    f.check_move_failed("arrived with checksum");
    CHECK(f.pools[1]->free_blocks() == protocol_fixture::pool_blocks);  // the reservation was given back
    // Undamaged, the same move commits.
    f.planes[0]->corrupt_puts = false;
    f.order_move({7, 0, 1, 4});
    CHECK(count_ok(f.events->moves()) == 1);
    CHECK(f.pools[1]->blocks_of(7) == 4);
  }

  TEST_CASE("duplicate and late messages change nothing") {
    protocol_fixture f(2);
    rmanager_actor dst = f.rmanagers[1];
    std::vector<move_reservation> answers;
    std::vector<commit_result> commits;
    auto client = f.sys->spawn([&](caf::event_based_actor* self) -> caf::behavior {
      for (int i = 0; i < 2; ++i)
        self->request(dst, caf::infinite, try_move_kvcache{500, 7, 3, 0}).then([&](move_reservation& r) {
          answers.push_back(r);
        });
      return {[&, self](caf::ok_atom) {
        // As a source would: the checksum of the blocks as they were put (the reserved ones, unwritten here).
        const uint64_t sum = f.pools[1]->checksum(answers[0].blocks).value();
        for (int i = 0; i < 2; ++i)
          self->request(dst, caf::infinite, commit_move{500, 7, 0, {0, 1, 2}, true, sum}).then([&](commit_result& c) {
            commits.push_back(c);
          });
      }};
    });
    f.sched->run();
    REQUIRE(answers.size() == 2);
    CHECK(answers[0].granted);
    CHECK(answers[1].blocks == answers[0].blocks);  // the same reservation, not a second one
    CHECK(f.pools[1]->free_blocks() == protocol_fixture::pool_blocks - 3);
    caf::anon_send(client, caf::ok_atom::value);
    f.sched->run();
    REQUIRE(commits.size() == 2);
    CHECK(commits[0].ok);
    CHECK(commits[1].ok);
    CHECK(f.pools[1]->blocks_of(7) == 3);
    // A late expiry timer and duplicate releases and aborts are no-ops after the first.
    f.sched->clock().advance_time(150ms);
    f.sched->run();
    CHECK(f.pools[1]->blocks_of(7) == 3);  // committed blocks outlive the lease
    for (int i = 0; i < 2; ++i) caf::anon_send(dst, release_blocks{7, 0});
    for (int i = 0; i < 2; ++i) caf::anon_send(dst, abort_move{500});
    f.sched->run();
    CHECK(f.pools[1]->free_blocks() == protocol_fixture::pool_blocks);
    CHECK(f.pools[1]->check().is_ok());
    caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
  }

  TEST_CASE("a stale heartbeat does not change the gManager's view") {
    protocol_fixture f(1);
    gmanager_actor gm = f.gmanager;
    std::vector<cluster_view> views;
    auto client = f.sys->spawn([&](caf::event_based_actor* self) -> caf::behavior {
      instance_stats fresh;
      fresh.total_blocks = 8;
      fresh.free_blocks = 3;
      instance_stats stale = fresh;
      stale.free_blocks = 8;
      // This actor is the rManager of instance 5.
      self->request(gm, caf::infinite, join_cluster{5, caf::actor_cast<rmanager_actor>(self), {}, stale, {}, {}})
          .then([=, &views](cluster_view&) {
            self->request(gm, caf::infinite, heartbeat{5, 1000000, fresh, {}}).then([&views](cluster_view& v) { views.push_back(v); });
            self->request(gm, caf::infinite, heartbeat{5, 999999, stale, {}}).then([&views](cluster_view& v) { views.push_back(v); });
          });
      return {[](caf::ok_atom) {}};
    });
    f.sched->run();
    REQUIRE(views.size() == 2);
    auto five = std::find_if(views[1].instances.begin(), views[1].instances.end(), [](const auto& i) { return i.inst_id == 5; });
    REQUIRE(five != views[1].instances.end());
    CHECK(five->free_blocks == 3);
    caf::anon_send_exit(client, caf::exit_reason::user_shutdown);
  }

  TEST_CASE("KV of another model or type is refused where it would go: joins, moves, replicas, prefix reads") {
    protocol_fixture f(0);
    f.prefix_caches = true;
    f.kv = {gpu::root_key("the test's model", ""), "f32"};
    for (instance_id i : {0, 1, 2}) f.add_instance(i);
    f.settle();
    const gpu::kv_identity mine = f.kv, bf16{mine.model, "bf16"}, other_model{gpu::root_key("another model", ""), "f32"};
    // A join: refused with a reason the operator reads; the view keeps its members.
    for (const auto& [kv, why] : {std::pair{bf16, "KV of type bf16, not f32"}, std::pair{other_model, "KV of another model"}}) {
      std::optional<caf::error> refusal;
      auto joiner = f.sys->spawn([&, kv = kv](caf::event_based_actor* self) -> caf::behavior {
        join_cluster j{9, caf::actor_cast<rmanager_actor>(self), {}, {}, {}, {}};
        j.kv = kv;
        self->request(f.gmanager, caf::infinite, j).then([](cluster_view&) {}, [&](caf::error& e) { refusal = e; });
        return {[](caf::ok_atom) {}};
      });
      f.sched->run();
      REQUIRE(refusal.has_value());
      CHECK_MESSAGE(f.sys->render(*refusal).find(std::string("instance 9 cannot join the cluster: its pool holds ") +
                                                 why) != std::string::npos,
                    f.sys->render(*refusal));
      caf::anon_send_exit(joiner, caf::exit_reason::user_shutdown);
    }
    CHECK(f.view().instances.size() == 3);
    // A move and a replica into instance 1: refused by name, nothing reserved.
    for (bool replica : {false, true}) {
      const auto r = f.ask<move_reservation>(f.rmanagers[1], try_move_kvcache{move_id(600 + replica), 7, 2, 0, replica, bf16});
      REQUIRE(r.has_value());
      CHECK_FALSE(r->granted);
      CHECK(r->reason.find("the source's pool holds KV of type bf16, not f32") != std::string::npos);
      CHECK(r->kv == mine);
    }
    CHECK(f.pools[1]->free_blocks() == protocol_fixture::pool_blocks);
    CHECK(f.ask<move_reservation>(f.rmanagers[1], try_move_kvcache{602, 7, 2, 0, false, mine})->granted);
    // A prefix read: a holder of another identity reads nothing for the owner; the same identity reads its block.
    const gpu::block_key root = gpu::root_key("the test's model", "");
    std::vector<int32_t> tokens(16);
    for (int32_t i = 0; i < 16; ++i) tokens[size_t(i)] = 100 + i;
    const gpu::block_key key = gpu::next_key(root, tokens);
    const uint32_t block = f.pools[2]->allocate_many({77, 2}, 1).value()[0];  // a request of instance 2 offers it
    REQUIRE(f.caches[2]->offer(key, root, tokens, block));
    CHECK(f.ask<prefix_read>(f.rmanagers[2], read_prefix{11, 0, root, {key}, tokens, 0, bf16})->physical.empty());
    CHECK(f.ask<prefix_read>(f.rmanagers[2], read_prefix{11, 0, root, {key}, tokens, 0, mine})->physical ==
          std::vector<uint32_t>{block});
    const auto copy = f.ask<replica_result>(f.rmanagers[2], copy_prefix{12, 11, 0, root, {key}, tokens, other_model});
    REQUIRE(copy.has_value());
    CHECK_FALSE(copy->ok);
    CHECK(copy->reason.find("instance 0's pool holds KV of another model") != std::string::npos);
  }

  TEST_CASE("a join with an id already in the cluster is refused and its heartbeats change nothing") {
    protocol_fixture f(1);
    gmanager_actor gm = f.gmanager;
    std::optional<caf::error> refusal;
    std::vector<cluster_view> views;
    auto twin = f.sys->spawn([&](caf::event_based_actor* self) -> caf::behavior {
      instance_stats claimed;
      claimed.total_blocks = 1000;
      claimed.free_blocks = 1000;
      self->request(gm, caf::infinite, join_cluster{0, caf::actor_cast<rmanager_actor>(self), {}, claimed, {}, {}})
          .then([](cluster_view&) {}, [&](caf::error& e) { refusal = e; });
      self->request(gm, caf::infinite, heartbeat{0, 1000000, claimed, {}}).then([&](cluster_view& v) { views.push_back(v); });
      return {[](caf::ok_atom) {}};
    });
    f.sched->run();
    REQUIRE(refusal.has_value());
    CHECK(f.sys->render(*refusal).find("instance id 0 is already in the cluster") != std::string::npos);
    REQUIRE(views.size() == 1);
    REQUIRE(views[0].instances.size() == 1);
    CHECK(views[0].instances[0].total_blocks == protocol_fixture::pool_blocks);  // still the first instance's
    CHECK(views[0].instances[0].rmanager == f.rmanagers[0]);
    caf::anon_send_exit(twin, caf::exit_reason::user_shutdown);
  }

  TEST_CASE("an rManager short of blocks borrows from the instance with the most free blocks") {
    protocol_fixture f(3);
    f.give_blocks(0, 7, 6);
    for (int i = 0; i < 5; ++i) (void)f.pools[1]->allocate({99, 1});  // instance 2 has the most room
    f.settle();  // heartbeats carry the new free counts into the rManagers' views
    caf::anon_send(f.rmanagers[0], need_blocks{7, 4});
    f.settle();
    REQUIRE(f.logs[0]->loans.size() == 1);
    CHECK(f.logs[0]->loans[0].ok);
    REQUIRE(f.logs[0]->switched.size() == 1);
    CHECK(f.logs[0]->switched[0].dst_inst == 2);
    CHECK(f.pools[2]->blocks_of(7) == 4);
    const auto moves = f.events->moves();
    REQUIRE(moves.size() == 1);
    CHECK(moves[0].self_initiated);
  }

  TEST_CASE("an instance lends none of the blocks its first queued request needs, unless it holds blocks for a room") {
    protocol_fixture f(3);
    f.give_blocks(0, 7, 6);
    f.give_blocks(2, 8, 4);           // instance 1 has 8 free blocks, instance 2 has 4
    f.promises[1]->set_queued(6);     // but the request first in instance 1's queue needs 6 of them
    f.settle();
    CHECK(protocol_fixture::member(f.view(), 1).free_blocks == 2);
    caf::anon_send(f.rmanagers[0], need_blocks{7, 3});
    f.settle();
    REQUIRE(f.logs[0]->loans.size() == 1);
    CHECK(f.logs[0]->loans[0].ok);
    CHECK(f.pools[2]->blocks_of(7) == 3);  // the loan went where nothing waits for the blocks
    CHECK(f.pools[1]->blocks_of(7) == 0);
    // A long request waits for its room: the members hold blocks back for it, and those count first.
    caf::anon_send(f.rmanagers[0], reserve_room{0, 5, 9});
    f.settle();
    REQUIRE(f.logs[0]->rooms.size() == 1);
    CHECK_FALSE(f.logs[0]->rooms[0].granted);
    f.settle();
    CHECK(protocol_fixture::member(f.view(), 1).held_for_room > 0);
    CHECK(protocol_fixture::member(f.view(), 1).free_blocks == 8);
  }

  TEST_CASE("a room is a promise: the holder lends its blocks to its own requests and the room waits for them") {
    protocol_fixture f(2);
    caf::anon_send(f.rmanagers[0], reserve_room{0, 5, 6});
    f.settle();
    REQUIRE(f.logs[0]->rooms.size() == 1);
    CHECK(f.logs[0]->rooms[0].granted);
    CHECK(f.pools[1]->free_blocks() == protocol_fixture::pool_blocks);  // promised, not taken
    CHECK(f.promises[1]->of(0, 5) == 6);
    CHECK(protocol_fixture::member(f.view(), 1).free_blocks == 2);  // others see only what is not promised
    // The holder's own request takes 5 of its blocks; the room's move of 4 cannot have them now.
    f.give_blocks(1, 9, 5);
    f.give_blocks(0, 5, 4);
    placement_update owner;
    owner.placement.push_back({5, 0, 4, true});
    caf::anon_send(f.rmanagers[0], owner);
    caf::anon_send(f.rmanagers[0], need_blocks{5, 4});
    f.settle();
    REQUIRE(f.logs[0]->loans.size() == 1);
    CHECK_FALSE(f.logs[0]->loans[0].ok);
    CHECK(f.logs[0]->loans[0].reason.find("4 promised to its room") != std::string::npos);
    CHECK(f.promises[1]->overdrawn());  // the holder starts nothing more in promised blocks
    CHECK(f.pools[0]->blocks_of(5) == 4);
    // Its request ends: the promise is covered again and the room's move goes through.
    f.end_request(1, 9);
    f.settle();
    CHECK_FALSE(f.promises[1]->overdrawn());
    caf::anon_send(f.rmanagers[0], need_blocks{5, 4});
    f.settle();
    REQUIRE(f.logs[0]->loans.size() == 2);
    CHECK(f.logs[0]->loans[1].ok);
    CHECK(f.pools[1]->blocks_of(5) == 4);
    CHECK(f.promises[1]->of(0, 5) == 2);
    // The long request ends: the rest of the promise goes with its blocks.
    caf::anon_send(f.rmanagers[0], request_released{5});
    f.settle();
    CHECK(f.promises[1]->rooms_total() == 0);
    CHECK(f.pools[1]->free_blocks() == protocol_fixture::pool_blocks);
    CHECK(f.pools[1]->check().is_ok());
  }

  TEST_CASE("a long request refused a room is held for: younger rooms and loans wait until it has its room") {
    protocol_fixture f(3);
    f.give_blocks(1, 99, 6);  // instance 1 has 2 spare blocks, instance 2 has 8
    f.give_blocks(0, 5, 4);   // and the long request's owner 4
    f.settle();
    caf::anon_send(f.rmanagers[0], reserve_room{0, 5, 12});
    f.settle();
    REQUIRE(f.logs[0]->rooms.size() == 1);
    CHECK_FALSE(f.logs[0]->rooms[0].granted);
    // The members hold blocks back for it: what is spare now first, the rest spread by pool.
    auto v = f.view();
    CHECK(protocol_fixture::member(v, 2).held_for_room == 8);
    CHECK(protocol_fixture::member(v, 1).held_for_room == 4);
    CHECK(protocol_fixture::member(v, 0).held_for_room == 0);  // its owner
    // A younger, smaller room would fit in what is spare, but waits; a loan goes past the held blocks (their
    // instances would refuse it) to the blocks nobody holds: the owner's, whose queue reports what its long
    // request keeps when it starts (nothing in this fixture). A move into held blocks is refused.
    caf::anon_send(f.rmanagers[2], reserve_room{2, 7, 2});
    f.give_blocks(1, 98, 2);
    caf::anon_send(f.rmanagers[1], need_blocks{98, 2});
    f.settle();
    REQUIRE(f.logs[2]->rooms.size() == 1);
    CHECK_FALSE(f.logs[2]->rooms[0].granted);
    CHECK(f.logs[2]->rooms[0].reason.find("request 5 of instance 0 waits for room first") != std::string::npos);
    REQUIRE(f.logs[1]->loans.size() == 1);
    CHECK(f.logs[1]->loans[0].ok);
    CHECK(f.pools[0]->blocks_of(98) == 2);
    CHECK(f.pools[2]->free_blocks() == protocol_fixture::pool_blocks);
    std::vector<move_reservation> answers;
    rmanager_actor holder = f.rmanagers[2];
    f.sys->spawn([&](caf::event_based_actor* self) {
      self->request(holder, caf::infinite, try_move_kvcache{77, 98, 2, 1}).then([&](move_reservation& r) {
        answers.push_back(r);
      });
    });
    f.sched->run();
    REQUIRE(answers.size() == 1);
    CHECK_FALSE(answers[0].granted);
    CHECK(f.pools[2]->free_blocks() == protocol_fixture::pool_blocks);
    // Instance 1's requests end: the long request has its room, then the younger one has its own.
    f.end_request(1, 99);
    f.end_request(1, 98);
    f.settle();
    caf::anon_send(f.rmanagers[0], reserve_room{0, 5, 12});
    f.settle();
    REQUIRE(f.logs[0]->rooms.size() == 2);
    CHECK(f.logs[0]->rooms[1].granted);
    CHECK(protocol_fixture::member(f.view(), 1).held_for_room == 0);
    caf::anon_send(f.rmanagers[2], reserve_room{2, 7, 2});
    f.settle();
    REQUIRE(f.logs[2]->rooms.size() == 2);
    CHECK(f.logs[2]->rooms[1].granted);
  }

  TEST_CASE("a younger room no larger than the waiting one goes first while it fits, until the pass limit") {
    protocol_fixture f(3, 300ms);
    f.give_blocks(1, 99, 6);  // instance 1 has 2 spare blocks, instance 2 has 8
    f.give_blocks(0, 5, 4);   // and the long request's owner 4
    f.settle();
    const room_answer waiting = f.ask_room(0, 5, 12);
    CHECK_FALSE(waiting.granted);
    CHECK(protocol_fixture::member(f.view(), 2).held_for_room == 8);
    // Request 7 of instance 2 needs 2 blocks: with 6 spare for it (4 on instance 0, 2 on instance 1) both rooms
    // do not fit, but the smaller one goes first.
    const room_answer passed = f.ask_room(2, 7, 2);
    CHECK(passed.granted);
    CHECK(f.promises[0]->of(2, 7) + f.promises[1]->of(2, 7) == 2);
    // A room larger than the waiting one waits, whatever fits.
    const room_answer larger = f.ask_room(1, 8, 13);
    CHECK_FALSE(larger.granted);
    CHECK(larger.reason.find("request 5 of instance 0 waits for room first") != std::string::npos);
    // The waiting request asks again while it waits; once it has waited 300 ms, smaller rooms wait too.
    for (int i = 0; i < 6; ++i) CHECK_FALSE(f.ask_room(0, 5, 12).granted);
    const room_answer late = f.ask_room(2, 9, 2);
    CHECK_FALSE(late.granted);
    CHECK(late.reason.find("request 5 of instance 0 waits for room first") != std::string::npos);
    // The blocks it waits for free up: it has its room.
    f.end_request(1, 99);
    caf::anon_send(f.rmanagers[2], request_released{7});
    f.settle();
    CHECK(f.ask_room(0, 5, 12).granted);
  }

  TEST_CASE("a request with a room moves its blocks into it, to the holder with the fewest of them") {
    protocol_fixture f(4);
    f.give_blocks(0, 5, 6);
    f.give_blocks(3, 99, protocol_fixture::pool_blocks);  // instance 3 holds no room
    f.settle();
    const room_answer room = f.ask_room(0, 5, 6);
    REQUIRE(room.granted);
    using holders = std::vector<std::pair<instance_id, uint32_t>>;
    REQUIRE(room.holders == holders{{1, 3}, {2, 3}});
    placement_update owner;
    owner.placement.push_back({5, 0, 6, true});
    caf::anon_send(f.rmanagers[0], owner);
    f.order_move({5, 0, 1, 2});
    CHECK(f.pools[1]->blocks_of(5) == 2);
    // The policy names instance 1 again: the blocks go to instance 2, which holds none of them yet.
    owner.placement = {{5, 0, 4, true}, {5, 1, 2, false}};
    caf::anon_send(f.rmanagers[0], owner);
    f.order_move({5, 0, 1, 2});
    CHECK(f.pools[1]->blocks_of(5) == 2);
    CHECK(f.pools[2]->blocks_of(5) == 2);
    CHECK(f.promises[1]->of(0, 5) == 1);
    CHECK(f.promises[2]->of(0, 5) == 1);
  }

  TEST_CASE("an owner that dies leaves nothing behind once nobody took its requests over: hosted blocks, rooms") {
    protocol_fixture f(3);
    f.give_blocks(0, 7, 4);
    f.order_move({7, 0, 1, 3});  // request 7: three blocks hosted on instance 1
    REQUIRE(f.pools[1]->blocks_of(7) == 3);
    const room_answer room = f.ask_room(0, 8, 6);  // request 8: a room promised on instances 1 and 2
    REQUIRE(room.granted);
    REQUIRE(f.promises[1]->of(0, 8) + f.promises[2]->of(0, 8) == 6);
    // Instance 2 hosts a request of instance 1: it stays, as does what instance 1 lent itself.
    f.give_blocks(1, 9, 2);
    f.order_move({9, 1, 2, 2});
    REQUIRE(f.pools[2]->blocks_of(9) == 2);
    // A view that leaves instance 0 out while it is still a member (silent a while) releases nothing.
    cluster_view silent = f.view();  // as new as any the rManager has seen
    std::erase_if(silent.instances, [](const instance_view& i) { return i.inst_id == 0; });
    REQUIRE(silent.has_member(0));
    caf::anon_send(f.rmanagers[1], silent);
    f.sched->run();
    CHECK(f.pools[1]->blocks_of(7) == 3);
    CHECK(f.promises[1]->rooms_total() + f.promises[2]->rooms_total() == 6);
    caf::anon_send_exit(f.rmanagers[0], caf::exit_reason::kill);
    f.settle();
    CHECK(f.pools[1]->blocks_of(7) == 3);  // kept a lease for a new owner
    f.settle(500ms);  // the lease ends
    CHECK(f.pools[1]->blocks_of(7) == 0);
    CHECK(f.promises[1]->rooms_total() == 0);
    CHECK(f.promises[2]->rooms_total() == 0);
    CHECK(f.pools[1]->free_blocks() == protocol_fixture::pool_blocks - 2);  // instance 1's own request 9
    CHECK(f.pools[2]->blocks_of(9) == 2);
    CHECK(f.pools[1]->check().is_ok());
    CHECK(f.pools[2]->check().is_ok());
    for (const instance_view& i : f.view().instances) CHECK(i.inst_id != 0);
  }

  TEST_CASE("a peer whose message names more blocks than the limit is refused and expelled from the cluster") {
    protocol_fixture f(2);
    f.peer_max_blocks = 2;  // instance 2 takes messages of at most two blocks
    f.add_instance(2);
    f.settle();
    f.give_blocks(0, 7, 5);
    f.order_move({7, 0, 2, 3});  // instance 0 asks instance 2 to reserve three blocks
    CHECK(f.pools[2]->used_blocks() == 0);  // refused: nothing reserved
    CHECK(f.pools[0]->blocks_of(7) == 5);   // the request's blocks stay where they were
    bool has0 = false, has1 = false, has2 = false;
    for (const instance_view& i : f.view().instances) {
      has0 = has0 || i.inst_id == 0;
      has1 = has1 || i.inst_id == 1;
      has2 = has2 || i.inst_id == 2;
    }
    CHECK_FALSE(has0);  // expelled
    CHECK(has1);
    CHECK(has2);
    f.settle(1000ms);   // its heartbeats and joins change nothing
    for (const instance_view& i : f.view().instances) CHECK(i.inst_id != 0);
    CHECK(f.pools[2]->check().is_ok());
  }

  TEST_CASE("each rManager knows the members of its view: a dead one is no member once the view is settled") {
    protocol_fixture f(3);
    for (const auto& n : f.nodes) {
      CHECK(n->member(0));
      CHECK(n->member(1));
      CHECK(n->member(2));
      CHECK_FALSE(n->member(7));  // the data plane drops what an unknown sender sends
    }
    caf::anon_send_exit(f.rmanagers[2], caf::exit_reason::kill);
    f.settle(1000ms);
    CHECK(f.nodes[0]->member(1));
    CHECK_FALSE(f.nodes[0]->member(2));
    CHECK_FALSE(f.nodes[1]->member(2));
  }

  TEST_CASE("a new owner takes a dead owner's hosted blocks over, and an older generation is fenced off") {
    protocol_fixture f(3);
    f.give_blocks(0, 7, 5);
    f.order_move({7, 0, 1, 3});  // request 7: blocks 0-2 hosted on instance 1, 3-4 with its owner
    REQUIRE(f.pools[1]->blocks_of(7) == 3);
    caf::anon_send_exit(f.rmanagers[0], caf::exit_reason::kill);
    f.settle();
    // Instance 2 takes the request over: the prefix that survived is the three hosted blocks.
    auto taken = f.ask<taken_over>(f.rmanagers[2], take_over{7, 0, 1, 4});
    REQUIRE(taken);
    CHECK(taken->reason.empty());
    REQUIRE(taken->holders == std::vector<instance_id>{1, 1, 1});
    for (uint32_t b : taken->physical) CHECK(f.pools[1]->owner(b) == gpu::block_owner{7, 2});
    f.settle(1000ms);  // past the lease: they stay, the new owner's now
    CHECK(f.pools[1]->blocks_of(7) == 3);
    // The dead owner's generation, or the same one for another owner, is refused; the same ask again is answered alike.
    auto stale = f.ask<orphan_adopted>(f.rmanagers[1], adopt_orphan{7, 0, 0, 0, {0}, {}});
    REQUIRE(stale);
    CHECK_FALSE(stale->ok);
    auto rival = f.ask<orphan_adopted>(f.rmanagers[1], adopt_orphan{7, 0, 1, 1, {0}, {}});
    REQUIRE(rival);
    CHECK_FALSE(rival->ok);
    auto again = f.ask<orphan_adopted>(f.rmanagers[1], adopt_orphan{7, 0, 2, 1, {0, 1, 2}, {}});
    REQUIRE(again);
    CHECK(again->ok);
    CHECK(again->physical == taken->physical);
    // The new owner's request ends: its release frees them.
    caf::anon_send(f.rmanagers[2], request_released{7});
    f.settle();
    CHECK(f.pools[1]->blocks_of(7) == 0);
    CHECK(f.pools[1]->free_blocks() == protocol_fixture::pool_blocks);
    CHECK(f.pools[1]->check().is_ok());
  }

  TEST_CASE("a room spreads over its holders as evenly as their spare blocks allow") {
    protocol_fixture f(3);
    f.give_blocks(2, 99, 4);  // instance 1 has 8 spare blocks, instance 2 has 4
    f.settle();
    const room_answer first = f.ask_room(0, 5, 6);
    REQUIRE(first.granted);
    using holders = std::vector<std::pair<instance_id, uint32_t>>;
    CHECK(first.holders == holders{{1, 3}, {2, 3}});
    CHECK(f.promises[1]->of(0, 5) == 3);
    CHECK(f.promises[2]->of(0, 5) == 3);
    // 5 and 1 spare now: the one with less gives all it has, the other the rest.
    f.settle();
    const room_answer second = f.ask_room(0, 6, 4);
    REQUIRE(second.granted);
    CHECK(second.holders == holders{{1, 3}, {2, 1}});
  }

  TEST_CASE("a room's chunk computed at its holder is committed there as the request's hosted blocks") {
    protocol_fixture f(2);
    const auto blocks = f.chunk_being_computed(41, 4);
    CHECK(f.promises[1]->of(0, 5) == 0);  // the room's promise went to the chunk
    f.settle(150ms);  // past the lease: the chunk is being computed, its reservation stays
    CHECK(f.pools[1]->blocks_of(5) == 4);
    f.pools[1]->mark_written(blocks, 1);  // the holder's engine wrote every layer (the pool has one)
    caf::anon_send(f.rmanagers[1], return_reservation{41});
    f.sched->run();
    CHECK(f.ask<bool>(f.rmanagers[0], commit_chunk{41, 5, {0, 1, 2, 3}}) == true);
    f.settle();
    CHECK(f.pools[1]->blocks_of(5) == 4);
    const auto reports = f.events->moves();
    REQUIRE_FALSE(reports.empty());
    CHECK(reports.back().ok);
    CHECK(reports.back().computed);
    CHECK(reports.back().blocks == 4);
    CHECK(f.ask<instance_stats>(f.rmanagers[0], caf::get_atom::value)->borrowed_blocks == 4);
    caf::anon_send(f.rmanagers[0], request_released{5});  // the request ends: its holder frees them
    f.settle();
    CHECK(f.pools[1]->blocks_of(5) == 0);
    CHECK(f.pools[1]->check().is_ok());
  }

  TEST_CASE("a chunk given up while its holder computes it goes back once the holder has stopped") {
    protocol_fixture f(2);
    f.chunk_being_computed(42, 4);
    caf::anon_send(f.rmanagers[0], abort_chunk{42});
    f.settle();
    REQUIRE(f.logs[1]->chunks_cancelled == std::vector<move_id>{42});  // the holder is told to stop
    CHECK(f.pools[1]->blocks_of(5) == 4);  // its engine may still be writing them
    caf::anon_send(f.rmanagers[1], return_reservation{42});
    f.settle();
    CHECK(f.pools[1]->blocks_of(5) == 0);
    CHECK(f.promises[1]->of(0, 5) == 4);  // back to the room
    CHECK_FALSE(f.ask<bool>(f.rmanagers[0], commit_chunk{42, 5, {0, 1, 2, 3}}).value());
  }

  TEST_CASE("a request that ends while its chunk is computed has the holder stop and free the chunk") {
    protocol_fixture f(2);
    f.chunk_being_computed(43, 3);
    caf::anon_send(f.rmanagers[0], request_released{5});
    f.settle();
    REQUIRE(f.logs[1]->chunks_cancelled == std::vector<move_id>{43});
    CHECK(f.pools[1]->blocks_of(5) == 3);
    caf::anon_send(f.rmanagers[1], return_reservation{43});
    f.settle();
    CHECK(f.pools[1]->blocks_of(5) == 0);
    CHECK(f.promises[1]->rooms_total() == 0);
    CHECK(f.pools[1]->check().is_ok());
  }

  TEST_CASE("a computed chunk whose owner never commits it goes back a lease after it ended") {
    protocol_fixture f(2);
    f.chunk_being_computed(44, 2);
    caf::anon_send(f.rmanagers[1], return_reservation{44});
    f.settle(20ms);  // 40 ms: within the lease
    CHECK(f.pools[1]->blocks_of(5) == 2);
    f.settle(100ms);
    CHECK(f.pools[1]->blocks_of(5) == 0);
    CHECK(f.ask<move_reservation>(f.rmanagers[1], try_move_kvcache{44, 5, 2, 0})->granted == false);  // expired
  }

  TEST_CASE("a chunk's reservation is taken only by its own request, once") {
    protocol_fixture f(2);
    REQUIRE(f.ask_room(0, 5, 2).granted);
    REQUIRE(f.ask<move_reservation>(f.rmanagers[0], reserve_chunk{45, 5, 1, 2})->granted);
    CHECK(f.ask<std::vector<uint32_t>>(f.rmanagers[1], take_reservation{45, 0, 6})->empty());  // another request
    CHECK(f.ask<std::vector<uint32_t>>(f.rmanagers[1], take_reservation{45, 0, 5})->size() == 2);
    CHECK(f.ask<std::vector<uint32_t>>(f.rmanagers[1], take_reservation{45, 0, 5})->empty());  // already taken
    CHECK(f.ask<std::vector<uint32_t>>(f.rmanagers[1], take_reservation{99, 0, 5})->empty());  // no such move
  }

  TEST_CASE("a long request's blocks get a second copy in another pool's free memory, given up first when needed") {
    protocol_fixture f(2, 0ms, 1);
    f.give_blocks(0, 7, 4);
    f.logs[0]->offer = block_pick{0, 7, {0, 1, 2, 3}, f.logs[0]->blocks[7], 0};
    f.settle();
    REQUIRE(f.logs[0]->replicated.size() == 1);
    CHECK(f.logs[0]->replicated[0].at == 1);
    CHECK(f.logs[0]->replicated[0].logical == std::vector<uint32_t>{0, 1, 2, 3});
    CHECK(f.pools[1]->spare_blocks() == 4);  // kept as spare blocks: free for anyone who needs them
    CHECK(f.pools[1]->free_blocks() == protocol_fixture::pool_blocks);
    CHECK(f.pools[0]->blocks_of(7) == 4);  // the owner's table and blocks do not change
    CHECK(f.logs[0]->switched.empty());
    // Instance 1 needs all its memory: the copies are given up and the owner hears which.
    auto taken = f.pools[1]->allocate_many({99, 1}, protocol_fixture::pool_blocks);
    REQUIRE(taken.is_ok());
    f.settle();
    REQUIRE(f.logs[0]->lost.size() == 1);
    CHECK(f.logs[0]->lost[0].at == 1);
    CHECK(f.logs[0]->lost[0].logical.size() == 4);
    for (uint32_t b : taken.value()) REQUIRE(f.pools[1]->release(b).is_ok());
    CHECK(f.pools[1]->check().is_ok());
    CHECK(f.pools[1]->free_blocks() == protocol_fixture::pool_blocks);
  }

  TEST_CASE("a copy asks for no more blocks than another member has room for, the room spread over the members") {
    protocol_fixture f(3, 0ms, 1);
    f.give_blocks(0, 7, 6);  // room for 2 at the owner
    auto others1 = f.pools[1]->allocate_many({99, 1}, 4);  // room for 4
    auto others2 = f.pools[2]->allocate_many({98, 2}, 3);  // room for 5
    REQUIRE((others1.is_ok() && others2.is_ok()));
    f.settle();  // the views show the room
    f.logs[0]->offer = block_pick{0, 7, {0, 1, 2, 3, 4, 5}, f.logs[0]->blocks[7], 0};
    f.settle();
    CHECK(f.logs[0]->offer_asked == 4);  // whichever member holds them, another has room for 4
    REQUIRE(f.logs[0]->replicated.size() == 1);  // all 6 fit nowhere whole
    CHECK(f.logs[0]->replicated[0].at == 2);
    CHECK(f.logs[0]->replicated[0].logical == std::vector<uint32_t>{0, 1, 2, 3});
    CHECK(f.pools[2]->spare_blocks() == 4);
  }

  TEST_CASE("a holder copies hosted blocks to a third instance, and the request's release frees the copies") {
    protocol_fixture f(3, 0ms, 1);
    f.give_blocks(0, 7, 4);
    f.order_move({7, 0, 1, 3});  // three blocks of request 7 hosted on instance 1
    REQUIRE(f.logs[0]->switched.size() == 1);
    const blocks_moved moved = f.logs[0]->switched[0];
    f.logs[0]->offer = block_pick{0, 7, moved.logical, moved.dst_blocks, 1};
    f.settle();
    REQUIRE(f.logs[0]->replicated.size() == 1);
    CHECK(f.logs[0]->replicated[0].at != 1);  // never where the blocks are
    const size_t copy_at = f.logs[0]->replicated[0].at;
    CHECK(f.pools[copy_at]->spare_blocks() == 3);
    // Blocks not hosted as named are not copied.
    f.logs[0]->offer = block_pick{0, 7, {3}, {moved.dst_blocks[0]}, 1};
    f.settle(100ms);
    CHECK(f.logs[0]->replicated.size() == 1);
    CHECK(f.pools[copy_at]->spare_blocks() == 3);
    // The request ends: its hosted blocks and its copies go.
    f.end_request(0, 7);
    caf::anon_send(f.rmanagers[0], request_released{7});
    f.settle();
    CHECK(f.pools[1]->blocks_of(7) == 0);
    for (const auto& pool : f.pools) {
      CHECK(pool->spare_blocks() == 0);
      CHECK(pool->free_blocks() == protocol_fixture::pool_blocks);
      CHECK(pool->check().is_ok());
    }
  }
}
