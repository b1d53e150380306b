// The attention server answers a chunk's queries over the blocks they name only once those blocks' layer
// is written (a chunk before it may still be computing them), with the partials of those blocks, and
// refuses blocks it does not keep for that request, or that are released while the queries wait.
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "actors/attention_server.hpp"
#include "actors/attention_wire.hpp"
#include "gpu/backend_registry.hpp"

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
    done(gpu::status::ok());
  }
  void flush(transport::peer_id, transport::completion done) override { done(gpu::status::ok()); }
  void send(transport::peer_id, transport::channel, std::span<const uint8_t> payload,
            transport::completion done) override {
    {
      std::lock_guard lock(mutex_);
      answers_.push_back(decode_partials({payload.begin(), payload.end()}).value());
    }
    arrived_.notify_all();
    done(gpu::status::ok());
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
  caf::actor server;

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
    server = caf::actor{};
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
}
