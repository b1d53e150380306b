// The remote router keeps the engine's two lanes apart: each lane's answers, errors and latency are its
// own, a lost holder fails what both lanes wait for from it, and the latency runs until the last answer.
#include <doctest/doctest.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "actors/attention_wire.hpp"
#include "actors/remote_router.hpp"

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
    done(gpu::status::ok());
  }
  void flush(transport::peer_id, transport::completion done) override { done(gpu::status::ok()); }
  void send(transport::peer_id peer, transport::channel, std::span<const uint8_t> payload,
            transport::completion done) override {
    std::lock_guard lock(mutex_);
    sent.push_back({peer, decode_attend({payload.begin(), payload.end()}).value()});
    done(gpu::status::ok());
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
    CHECK(router.take_failed() == std::vector<uint64_t>{1, 3});
    CHECK(router.take_failed().empty());
    // A holder that does not answer in time: its requests failed, those answered did not.
    plane->sent.clear();
    const gpu::remote_attention_job lane1[] = {a.job(1, 4), b.job(2, 5)};
    REQUIRE(router.begin(1, lane1).is_ok());
    router.on_partials(1, answer(plane->sent[0].second, 1.0f));
    const gpu::status late = router.finish(1);
    CHECK_FALSE(late.is_ok());
    CHECK(late.message().find("did not answer") != std::string::npos);
    CHECK(router.take_failed() == std::vector<uint64_t>{5});
    // A holder that cannot attend one request names that request alone.
    plane->sent.clear();
    REQUIRE(router.begin(0, lane0).is_ok());
    router.on_partials(1, answer(plane->sent[0].second, 1.0f));
    router.on_partials(2, answer(plane->sent[1].second, 0, false));
    router.on_partials(1, answer(plane->sent[2].second, 1.0f));
    CHECK_FALSE(router.finish(0).is_ok());
    CHECK(router.take_failed() == std::vector<uint64_t>{2});
  }
}
