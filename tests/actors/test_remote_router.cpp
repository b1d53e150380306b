// The remote router keeps the engine's two lanes apart: each lane's answers, errors and latency are its
// own, a lost holder fails what both lanes wait for from it, and the latency runs until the last answer. A
// long step's queries to several holders on another node go once, through the first of them.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <mutex>
#include <thread>

#include "actors/logic/attention_wire.hpp"
#include "actors/logic/remote_router.hpp"

using namespace illm;
using namespace illm::actors;

namespace {

constexpr int n_heads = 2, head_dim = 4;

/// A data plane that keeps the attend messages sent, for the test to answer.
class recording_plane final : public transport::data_plane {
 public:
  transport::peer_id self() const override { return 0; }
  transport::result<transport::remote_region> register_memory(void*, uint64_t) override { return transport::remote_region{}; }
  void put(transport::peer_id, const void*, uint64_t, const transport::remote_region&, uint64_t,
           transport::completion done) override {
    done(transport::status::ok());
  }
  void flush(transport::peer_id, transport::completion done) override { done(transport::status::ok()); }
  void send(transport::peer_id peer, transport::channel, std::span<const uint8_t> payload,
            transport::completion done) override {
    std::lock_guard lock(mutex_);
    sent.push_back({peer, decode_attend({payload.begin(), payload.end()}).value()});
    done(transport::status::ok());
  }
  void on_message(transport::channel, transport::message_handler) override {}
  transport::traffic counters() const override { return {}; }

  std::vector<std::pair<transport::peer_id, attend>> sent;

 private:
  std::mutex mutex_;
};

/// The holder's answer to `a`: every partial row set to `value`.
std::vector<uint8_t> answer(const attend& a, float value, bool ok = true) {
  partials p;
  p.tag = a.tag;
  p.ok = ok;
  p.error = ok ? "" : "no such blocks";
  const size_t rows = size_t(a.n_q) * n_heads;
  if (ok) {
    p.m.assign(rows, value);
    p.e.assign(rows, value);
    p.ma.assign(rows * head_dim, value);
  }
  return encode(p);
}

/// Where one job's query comes from and its partial goes.
struct job_buffers {
  std::vector<float> q = std::vector<float>(n_heads * head_dim, 1.0f);
  int32_t pos = 7;
  std::vector<float> m = std::vector<float>(n_heads), e = std::vector<float>(n_heads),
                     ma = std::vector<float>(n_heads * head_dim);
  gpu::remote_attention_job job(uint32_t holder, uint64_t seq = 1) {
    return {seq, 0, holder, {}, {}, q.data(), q.size(), &pos, 1, m.data(), e.data(), ma.data()};
  }
};

/// Where a job of four query rows comes from and its partial goes.
struct row_buffers {
  static constexpr int rows = 4;
  std::vector<float> q = std::vector<float>(rows * n_heads * head_dim, 1.0f);
  std::vector<int32_t> pos = {10, 11, 12, 13};
  std::vector<float> m = std::vector<float>(rows * n_heads, 7.0f), e = std::vector<float>(rows * n_heads, 7.0f),
                     ma = std::vector<float>(rows * n_heads * head_dim, 7.0f);
  std::vector<uint32_t> blocks = {5};
  std::vector<int32_t> block_pos = {0};
  gpu::remote_attention_job job(uint32_t holder, uint64_t seq, int n_q = rows) {
    return {seq, 0, holder, blocks, block_pos, q.data(), size_t(n_heads * head_dim), pos.data(), n_q, m.data(),
            e.data(), ma.data()};
  }
};

}  // namespace

TEST_SUITE("actors") {
  TEST_CASE("the remote router keeps two lanes apart: answers, errors, lost holders and latency") {
    auto plane = std::make_shared<recording_plane>();
    metrics::histogram latency({0.001, 1});
    remote_router router(plane, n_heads, head_dim, std::chrono::milliseconds(2000), &latency);
    job_buffers a0, a1, b0;
    const gpu::remote_attention_job lane0[] = {a0.job(1), a1.job(2)}, lane1[] = {b0.job(1)};
    const auto begun = std::chrono::steady_clock::now();
    REQUIRE(router.begin(0, lane0).is_ok());
    REQUIRE(router.begin(1, lane1).is_ok());
    REQUIRE(plane->sent.size() == 3);
    CHECK_FALSE(router.begin(2, lane1).is_ok());  // two lanes only

    // Lane 1 is answered first and finishes alone; lane 0's answers land in lane 0's buffers.
    router.on_partials(1, answer(plane->sent[2].second, 3.0f));
    REQUIRE(router.finish(1).is_ok());
    CHECK(b0.ma[0] == 3.0f);
    CHECK(a0.ma[0] == 0.0f);
    router.on_partials(1, answer(plane->sent[0].second, 5.0f));
    router.on_partials(2, answer(plane->sent[1].second, 6.0f));
    const auto answered = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the engine runs the other lane meanwhile
    REQUIRE(router.finish(0).is_ok());
    CHECK(a0.ma[0] == 5.0f);
    CHECK(a1.m[1] == 6.0f);
    // Each lane's latency ends at its last answer, not when the engine came for it.
    CHECK(latency.count() == 2);
    CHECK(latency.sum() <= 2 * std::chrono::duration<double>(answered - begun).count());

    // A holder's error fails its own lane only; a lost holder fails both lanes' jobs towards it.
    plane->sent.clear();
    REQUIRE(router.begin(0, lane0).is_ok());
    REQUIRE(router.begin(1, lane1).is_ok());
    router.on_partials(2, answer(plane->sent[1].second, 0, false));
    router.peer_failed(1, "connection reset");
    const gpu::status first = router.finish(0), second = router.finish(1);
    CHECK_FALSE(first.is_ok());
    CHECK(first.message().find("no such blocks") != std::string::npos);  // its first error: holder 2's
    CHECK_FALSE(second.is_ok());
    CHECK(second.message().find("connection reset") != std::string::npos);
    plane->sent.clear();
    REQUIRE(router.begin(1, lane1).is_ok());  // a new round starts clean
    router.on_partials(1, answer(plane->sent[0].second, 1.0f));
    CHECK(router.finish(1).is_ok());

    // A round left in flight by a failed step is dropped at the next step: its late answer writes nothing.
    plane->sent.clear();
    b0.ma[0] = -1.0f;
    REQUIRE(router.begin(1, lane1).is_ok());
    router.cancel();
    router.on_partials(1, answer(plane->sent[0].second, 9.0f));
    CHECK(b0.ma[0] == -1.0f);
    CHECK(router.finish(1).is_ok());  // nothing outstanding
  }

  TEST_CASE("the remote router names the requests whose attention failed, once each") {
    auto plane = std::make_shared<recording_plane>();
    remote_router router(plane, n_heads, head_dim, std::chrono::milliseconds(100));
    job_buffers a, b, c;
    const gpu::remote_attention_job lane0[] = {a.job(1, 1), b.job(2, 2), c.job(1, 3)};
    REQUIRE(router.begin(0, lane0).is_ok());
    router.on_partials(2, answer(plane->sent[1].second, 1.0f));
    router.peer_failed(1, "connection reset");  // holder 1 held blocks of requests 1 and 3
    CHECK_FALSE(router.finish(0).is_ok());
    CHECK(router.take_failed() == std::vector<gpu::failed_attention>{{1, 1}, {3, 1}});
    CHECK(router.take_failed().empty());
    // A holder that does not answer in time: its requests failed, those answered did not.
    plane->sent.clear();
    const gpu::remote_attention_job lane1[] = {a.job(1, 4), b.job(2, 5)};
    REQUIRE(router.begin(1, lane1).is_ok());
    router.on_partials(1, answer(plane->sent[0].second, 1.0f));
    const gpu::status late = router.finish(1);
    CHECK_FALSE(late.is_ok());
    CHECK(late.message().find("did not answer") != std::string::npos);
    CHECK(router.take_failed() == std::vector<gpu::failed_attention>{{5, 2}});
    // A holder that cannot attend one request names that request alone.
    plane->sent.clear();
    REQUIRE(router.begin(0, lane0).is_ok());
    router.on_partials(1, answer(plane->sent[0].second, 1.0f));
    router.on_partials(2, answer(plane->sent[1].second, 0, false));
    router.on_partials(1, answer(plane->sent[2].second, 1.0f));
    CHECK_FALSE(router.finish(0).is_ok());
    CHECK(router.take_failed() == std::vector<gpu::failed_attention>{{2, 2}});
  }

  TEST_CASE("a long step's jobs to several holders on another node go once, through the first of them") {
    auto plane = std::make_shared<recording_plane>();  // instance 0
    auto nodes = std::make_shared<peer_nodes>();
    nodes->update({{0, "a"}, {1, "b"}, {2, "b"}, {3, "a"}, {4, "b"}}, {0, 1, 2, 3, 4});
    remote_router router(plane, n_heads, head_dim, std::chrono::milliseconds(2000), nullptr, nodes, 4);
    row_buffers h1, h2, h3, h4, other, short_step;
    h2.blocks = {8, 9};
    h2.block_pos = {16, 32};
    const gpu::remote_attention_job lane[] = {h1.job(1, 1), h2.job(2, 1), h3.job(3, 1), h4.job(4, 1),
                                              other.job(2, 6), short_step.job(4, 7, 2)};
    REQUIRE(router.begin(0, lane).is_ok());
    // Request 1: holders 1, 2 and 4 on node b through holder 1, holder 3 on this node directly; request 6 and
    // the short step of request 7 alone.
    REQUIRE(plane->sent.size() == 4);
    const attend& relayed = plane->sent[0].second;
    CHECK(plane->sent[0].first == 1);
    REQUIRE(relayed.forwards.size() == 2);
    CHECK(relayed.forwards[0].peer == 2);
    CHECK(relayed.forwards[0].blocks == std::vector<uint32_t>{8, 9});
    CHECK(relayed.forwards[0].block_pos == std::vector<int32_t>{16, 32});
    CHECK(relayed.forwards[1].peer == 4);
    CHECK(plane->sent[1].first == 3);
    CHECK(plane->sent[1].second.forwards.empty());
    CHECK(plane->sent[2].first == 2);  // request 6
    CHECK(plane->sent[2].second.forwards.empty());
    CHECK(plane->sent[3].first == 4);  // fewer rows than relayed
    CHECK(plane->sent[3].second.forwards.empty());
    for (const auto& [peer, a] : plane->sent) router.on_partials(peer, answer(a, 2.0f));
    REQUIRE(router.finish(0).is_ok());
    // The relay's merged partial stands for all three; the other two add nothing to the merge.
    CHECK(h1.ma[0] == 2.0f);
    CHECK(h3.ma[0] == 2.0f);
    for (const row_buffers* b : {&h2, &h4}) {
      CHECK(std::isinf(b->m[0]));
      CHECK(b->e[0] == 0.0f);
      CHECK(b->ma[0] == 0.0f);
    }
    // A relayed holder that is lost fails the relay's job.
    plane->sent.clear();
    REQUIRE(router.begin(0, lane).is_ok());
    router.peer_failed(4, "connection reset");
    for (size_t i = 1; i < plane->sent.size(); ++i) router.on_partials(plane->sent[i].first, answer(plane->sent[i].second, 1.0f));
    CHECK_FALSE(router.finish(0).is_ok());
    const auto failed = router.take_failed();  // the relayed holder that was lost is named
    CHECK(std::find(failed.begin(), failed.end(), gpu::failed_attention{1, 4}) != failed.end());
  }
}
