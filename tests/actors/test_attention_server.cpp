// The attention server answers a chunk's queries over the blocks they name only once those blocks' layer
// is written (a chunk before it may still be computing them), with the partials of those blocks, and
// refuses blocks it does not keep for that request, or that are released while the queries wait. It
// relays queries to a holder on its node and answers once with both partials merged; merging partials
// over two sets of blocks gives the partial over both.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "actors/attention_server.hpp"
#include "actors/logic/attention_wire.hpp"
#include "gpu/backend_registry.hpp"
#include "transport/inproc/inproc.hpp"

using namespace illm;
using namespace illm::actors;

namespace {

constexpr int n_layers = 2, n_heads = 2, head_dim = 8;

/// A data plane that keeps the partials the server sends.
class answer_plane final : public transport::data_plane {
 public:
  transport::peer_id self() const override { return 1; }
  transport::result<transport::remote_region> register_memory(void*, uint64_t) override {
    return transport::remote_region{};
  }
  void put(transport::peer_id, const void*, uint64_t, const transport::remote_region&, uint64_t,
           transport::completion done) override {
    done(transport::status::ok());
  }
  void flush(transport::peer_id, transport::completion done) override { done(transport::status::ok()); }
  void send(transport::peer_id, transport::channel, std::span<const uint8_t> payload,
            transport::completion done) override {
    {
      std::lock_guard lock(mutex_);
      answers_.push_back(decode_partials({payload.begin(), payload.end()}).value());
    }
    arrived_.notify_all();
    done(transport::status::ok());
  }
  void on_message(transport::channel, transport::message_handler) override {}
  transport::traffic counters() const override { return {}; }

  /// The answers so far, once there are `n` of them or after `bound` (then fewer).
  std::vector<partials> wait_for(size_t n, std::chrono::milliseconds bound) {
    std::unique_lock lock(mutex_);
    arrived_.wait_for(lock, bound, [&] { return answers_.size() >= n; });
    return answers_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<partials> answers_;
};

/// A query at position `pos` for `layer` over `blocks` of request 7 of instance 0, from instance 2.
incoming_attend chunk_query(uint64_t tag, int layer, const std::vector<uint32_t>& blocks, int32_t pos = 100) {
  attend a;
  a.tag = tag;
  a.req_id = 7;
  a.owner = 0;
  a.layer = layer;
  a.n_q = 1;
  a.num_blocks = uint32_t(blocks.size());
  a.q.assign(n_heads * head_dim, 0.25f);
  a.q_pos = {pos};
  a.blocks = blocks;
  for (size_t i = 0; i < blocks.size(); ++i) a.block_pos.push_back(int32_t(i) * 16);
  return {2, encode(a)};
}

struct server_rig {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> sys;
  std::shared_ptr<gpu::backend> device{std::move(gpu::make_backend("cpu", 1)).value()};
  std::shared_ptr<gpu::kv_pool> pool;
  std::shared_ptr<answer_plane> plane = std::make_shared<answer_plane>();
  attention_server_actor server;

  server_rig() {
    register_messages(cfg);
    sys = std::make_unique<caf::actor_system>(cfg);
    pool = std::make_shared<gpu::kv_pool>(
        gpu::kv_pool::create(*device, {n_layers, n_heads, head_dim, gpu::dtype::f32}, 8).value());
    // Keys and values that differ per block and token, so that partials tell blocks apart.
    float* kv = pool->base_f32();
    for (size_t i = 0; i < size_t(8) * pool->layout().block_elements(); ++i) kv[i] = float((i * 7919) % 97) / 97.0f;
    attention_server_config c{pool, std::make_shared<hosted_blocks>(), device, {n_heads, n_heads, head_dim},
                              n_layers, plane, std::chrono::milliseconds(60000)};
    server = spawn_attention_server(*sys, c);
  }
  ~server_rig() {
    caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
    server = attention_server_actor{};
    sys->await_all_actors_done();
  }
};

}  // namespace

TEST_SUITE("actors") {
  TEST_CASE("a chunk's queries wait for the layer they read, then get those blocks' partials") {
    server_rig rig;
    const auto blocks = rig.pool->allocate_many({7, 0}, 2).value();  // reserved: nothing written yet
    caf::anon_send(rig.server, chunk_query(11, 1, blocks));
    caf::anon_send(rig.server, chunk_query(12, 0, blocks));
    rig.pool->mark_written(blocks, 1);  // layer 0 of both blocks: the second query can go, not the first
    auto answers = rig.plane->wait_for(1, std::chrono::seconds(30));
    REQUIRE(answers.size() == 1);
    CHECK(answers[0].tag == 12);
    CHECK(answers[0].ok);
    CHECK(rig.plane->wait_for(2, std::chrono::milliseconds(300)).size() == 1);  // layer 1 is not written
    rig.pool->mark_written(blocks, 2);
    answers = rig.plane->wait_for(2, std::chrono::seconds(30));
    REQUIRE(answers.size() == 2);
    CHECK(answers[1].tag == 11);
    REQUIRE(answers[1].ok);
    // The partials are MicroAttention over exactly those blocks at that layer.
    const attend q = decode_attend(chunk_query(11, 1, blocks).payload).value();
    std::vector<float> m(n_heads), e(n_heads), ma(n_heads * head_dim);
    REQUIRE(rig.device
                ->micro_attention({n_heads, n_heads, head_dim}, q.q.data(), n_heads * head_dim, q.q_pos.data(), 1,
                                  rig.pool->layer_view(1), q.blocks.data(), q.block_pos.data(), 2, m.data(), e.data(),
                                  ma.data())
                .is_ok());
    CHECK(answers[1].m == m);
    CHECK(answers[1].e == e);
    CHECK(answers[1].ma == ma);
  }

  TEST_CASE("a chunk's queries over blocks kept for another request, or released while they wait, fail") {
    server_rig rig;
    const auto others = rig.pool->allocate_many({8, 0}, 1).value();  // request 8's, not 7's
    caf::anon_send(rig.server, chunk_query(21, 0, others));
    auto answers = rig.plane->wait_for(1, std::chrono::seconds(30));
    REQUIRE(answers.size() == 1);
    CHECK_FALSE(answers[0].ok);
    CHECK(answers[0].error.find("keeps no block") != std::string::npos);
    const auto waiting = rig.pool->allocate_many({7, 0}, 1).value();
    caf::anon_send(rig.server, chunk_query(22, 0, waiting));
    CHECK(rig.plane->wait_for(2, std::chrono::milliseconds(300)).size() == 1);  // it waits
    REQUIRE(rig.pool->release(waiting[0]).is_ok());  // its request ended
    answers = rig.plane->wait_for(2, std::chrono::seconds(30));
    REQUIRE(answers.size() == 2);
    CHECK(answers[1].tag == 22);
    CHECK_FALSE(answers[1].ok);
  }

  TEST_CASE("a decode attend names the owner's logical blocks there, and the holder attends exactly those") {
    CHECK(logical_runs_of(std::vector<int32_t>{48, 32, 64, 160}) == std::vector<uint32_t>{2, 3, 10, 1});
    hosted_blocks h;
    h.add(2, 9, {4, 5}, {40, 41});  // a move its owner gave up (the commit's answer was lost), not taken back yet
    h.add(2, 9, {6, 7}, {42, 43});  // the move the owner's table has
    const auto exact = h.find_logical(2, 9, {6, 2});
    REQUIRE(exact);
    CHECK(exact->physical == std::vector<uint32_t>{42, 43});
    CHECK(exact->first_token == std::vector<int32_t>{96, 112});
    CHECK(h.find(2, 9, 2)->physical == std::vector<uint32_t>{40, 41});  // by count alone: the wrong blocks
    CHECK_FALSE(h.find_logical(2, 9, {8, 1}));
    h.add(2, 9, {4}, {50});  // a later move of the same place is the one attended
    CHECK(h.find_logical(2, 9, {4, 1})->physical == std::vector<uint32_t>{50});
    attend a;
    a.n_q = 1;
    a.q.assign(size_t(n_heads) * head_dim, 0.0f);
    a.q_pos = {100};
    a.num_blocks = 2;
    a.logical_runs = {6, 2};
    CHECK(decode_attend(encode(a)).value().logical_runs == a.logical_runs);
    a.logical_runs = {6, 3};  // runs that do not add up to num_blocks: a malformed message
    CHECK_FALSE(decode_attend(encode(a)).is_ok());
  }

  TEST_CASE("merging the partials over two sets of blocks gives the partial over both") {
    server_rig rig;  // its pool and device
    const auto blocks = rig.pool->allocate_many({7, 0}, 4).value();
    const attend q = decode_attend(chunk_query(1, 1, blocks, 70).payload).value();
    auto partial = [&](size_t first, size_t n) {
      partials p;
      p.m.resize(n_heads);
      p.e.resize(n_heads);
      p.ma.resize(n_heads * head_dim);
      REQUIRE(rig.device
                  ->micro_attention({n_heads, n_heads, head_dim}, q.q.data(), n_heads * head_dim, q.q_pos.data(), 1,
                                    rig.pool->layer_view(1), q.blocks.data() + first, q.block_pos.data() + first,
                                    int(n), p.m.data(), p.e.data(), p.ma.data())
                  .is_ok());
      return p;
    };
    partials both = partial(0, 2);
    merge_partials(both, partial(2, 2), head_dim);
    const partials all = partial(0, 4);
    for (size_t r = 0; r < all.m.size(); ++r) {
      CHECK(both.m[r] == doctest::Approx(all.m[r]).epsilon(1e-6));
      CHECK(both.e[r] == doctest::Approx(all.e[r]).epsilon(1e-5));
    }
    for (size_t i = 0; i < all.ma.size(); ++i) CHECK(both.ma[i] == doctest::Approx(all.ma[i]).epsilon(1e-5));
    partials empty = all;  // a partial with no keys seen adds nothing
    std::fill(empty.e.begin(), empty.e.end(), 0.0f);
    partials same = all;
    merge_partials(same, empty, head_dim);
    CHECK(same.ma == all.ma);
  }

  TEST_CASE("an attend relayed to a holder on the node is answered once, the two holders' partials merged") {
    caf::actor_system_config cfg;
    register_messages(cfg);
    caf::actor_system sys{cfg};
    auto device = std::shared_ptr<gpu::backend>(std::move(gpu::make_backend("cpu", 1)).value());
    auto fabric = std::make_shared<transport::inproc_fabric>();
    auto requester = fabric->connect(0).value();
    std::mutex mutex;
    std::condition_variable arrived;
    std::vector<partials> answers;
    requester->on_message(transport::channel::partials, [&](transport::peer_id, std::vector<uint8_t> bytes) {
      std::lock_guard lock(mutex);
      answers.push_back(decode_partials(bytes).value());
      arrived.notify_all();
    });
    std::vector<std::shared_ptr<gpu::kv_pool>> pools;
    std::vector<std::shared_ptr<transport::inproc_endpoint>> planes;
    std::vector<attention_server_actor> servers;
    for (uint32_t id : {1u, 2u}) {
      auto pool = std::make_shared<gpu::kv_pool>(
          gpu::kv_pool::create(*device, {n_layers, n_heads, head_dim, gpu::dtype::f32}, 8).value());
      float* kv = pool->base_f32();
      for (size_t i = 0; i < size_t(8) * pool->layout().block_elements(); ++i)
        kv[i] = float((i * (7919 + 104 * id)) % 97) / 97.0f;
      auto plane = fabric->connect(id).value();
      auto own_device = std::shared_ptr<gpu::backend>(std::move(gpu::make_backend("cpu", 1)).value());  // a kernel's scratch is its own
      attention_server_actor server = spawn_attention_server(
          sys, {pool, std::make_shared<hosted_blocks>(), own_device, {n_heads, n_heads, head_dim}, n_layers, plane});
      plane->on_message(transport::channel::attend, [server](transport::peer_id from, std::vector<uint8_t> b) {
        caf::anon_send(server, incoming_attend{from, std::move(b)});
      });
      plane->on_message(transport::channel::partials, [server](transport::peer_id from, std::vector<uint8_t> b) {
        caf::anon_send(server, incoming_partials{from, std::move(b)});  // this test's holders only relay
      });
      pools.push_back(pool);
      planes.push_back(plane);
      servers.push_back(server);
    }
    const auto here = pools[0]->allocate_many({7, 0}, 2).value(), there = pools[1]->allocate_many({7, 0}, 2).value();
    pools[0]->mark_written(here, n_layers);
    pools[1]->mark_written(there, n_layers);
    attend a = decode_attend(chunk_query(31, 1, here, 90).payload).value();
    a.forwards.push_back({2, there, {32, 48}});
    requester->send(1, transport::channel::attend, encode(a), [](transport::status) {});
    std::unique_lock lock(mutex);
    REQUIRE(arrived.wait_for(lock, std::chrono::seconds(30), [&] { return !answers.empty(); }));
    REQUIRE(answers.size() == 1);
    REQUIRE_MESSAGE(answers[0].ok, answers[0].error);
    CHECK(answers[0].tag == 31);
    // What the two holders compute over their own blocks, merged: what the relay answered.
    auto partial_at = [&](size_t holder, const std::vector<uint32_t>& blocks, const std::vector<int32_t>& pos) {
      partials p;
      p.m.resize(n_heads);
      p.e.resize(n_heads);
      p.ma.resize(n_heads * head_dim);
      REQUIRE(device
                  ->micro_attention({n_heads, n_heads, head_dim}, a.q.data(), n_heads * head_dim, a.q_pos.data(), 1,
                                    pools[holder]->layer_view(1), blocks.data(), pos.data(), int(blocks.size()),
                                    p.m.data(), p.e.data(), p.ma.data())
                  .is_ok());
      return p;
    };
    partials expected = partial_at(0, here, {0, 16});
    merge_partials(expected, partial_at(1, there, {32, 48}), head_dim);
    CHECK(answers[0].m == expected.m);
    CHECK(answers[0].e == expected.e);
    CHECK(answers[0].ma == expected.ma);
    // A relayed holder that keeps no such blocks makes the whole answer an error.
    a.tag = 32;
    a.forwards = {{2, {7}, {64}}};
    requester->send(1, transport::channel::attend, encode(a), [](transport::status) {});
    REQUIRE(arrived.wait_for(lock, std::chrono::seconds(30), [&] { return answers.size() == 2; }));
    CHECK(answers[1].tag == 32);
    CHECK_FALSE(answers[1].ok);
    CHECK(answers[1].error.find("keeps no block") != std::string::npos);
    lock.unlock();
    for (auto& server : servers) caf::anon_send_exit(server, caf::exit_reason::user_shutdown);
    servers.clear();
    sys.await_all_actors_done();
  }
}

TEST_SUITE("actors") {
  TEST_CASE("a decode token's attend is answered while the prefill attends queued before it still wait") {
    server_rig rig;  // its pool, plane and system; the servers here are its instance's two
    attention_server_config c{rig.pool, std::make_shared<hosted_blocks>(),
                              std::shared_ptr<gpu::backend>(std::move(gpu::make_backend("cpu", 1)).value()),
                              {n_heads, n_heads, head_dim}, n_layers, rig.plane, std::chrono::milliseconds(60000)};
    c.watches_writes = false;  // the rig's own server does
    const auto kept = rig.pool->allocate_many({9, 2}, 2).value();  // request 9 of instance 2, hosted here
    c.hosted->add(2, 9, {0, 1}, kept);
    const auto chunk_blocks = rig.pool->allocate_many({7, 0}, 6).value();
    rig.pool->mark_written(chunk_blocks, n_layers);
    const attention_servers servers =
        spawn_attention_servers(*rig.sys, c, std::shared_ptr<gpu::backend>(std::move(gpu::make_backend("cpu", 1)).value()));
    attend decode{.tag = 1, .req_id = 9, .owner = 2, .n_q = 1, .num_blocks = 2};
    decode.q.assign(n_heads * head_dim, 0.5f);
    decode.q_pos = {40};
    attend prefill = decode_attend(chunk_query(0, 1, chunk_blocks).payload).value();
    prefill.n_q = 64;
    prefill.q.assign(size_t(64) * n_heads * head_dim, 0.25f);
    prefill.q_pos.assign(64, 100);
    CHECK(is_decode_attend(encode(decode)));
    CHECK_FALSE(is_decode_attend(encode(prefill)));
    CHECK_FALSE(is_decode_attend(chunk_query(2, 1, chunk_blocks).payload));  // one row, but a chunk's: blocks named
    CHECK_FALSE(is_decode_attend({1, 2, 3}));
    constexpr size_t backlog = 4000;
    std::vector<std::vector<uint8_t>> payloads;  // encoded first, so that they queue faster than they are answered
    for (size_t i = 0; i < backlog; ++i) {
      prefill.tag = 1000 + i;
      payloads.push_back(encode(prefill));
    }
    for (auto& payload : payloads) servers.accept(2, std::move(payload));
    servers.accept(2, encode(decode));  // after all of them
    const auto answers = rig.plane->wait_for(backlog + 1, std::chrono::seconds(120));
    REQUIRE(answers.size() == backlog + 1);
    const auto it = std::find_if(answers.begin(), answers.end(), [](const partials& p) { return p.tag == 1; });
    REQUIRE(it != answers.end());
    REQUIRE_MESSAGE(it->ok, it->error);
    CHECK(size_t(it - answers.begin()) < backlog / 2);  // one queue would have answered it last
    for (const attention_server_actor& s : {servers.decode, servers.prefill}) caf::anon_send_exit(s, caf::exit_reason::user_shutdown);
  }
}
