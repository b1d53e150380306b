// The UCX data plane over tcp on lo, two planes in one process: puts land where they were aimed and
// only there, messages (eager and rendezvous) arrive whole with the sender's id, counters are exact,
// a dead peer fails operations instead of hanging them, and bad puts are refused before UCX.
#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "transport/ucx/ucx_plane.hpp"

using namespace illm;
using namespace illm::transport;
using namespace std::chrono_literals;

namespace {

/// Every status a set of operations completed with, from whichever thread completes them.
class outcomes {
 public:
  completion record() {
    return [this](transport::status s) {
      std::lock_guard lock(mutex_);
      got_.push_back(std::move(s));
    };
  }
  size_t size() const {
    std::lock_guard lock(mutex_);
    return got_.size();
  }
  std::vector<transport::status> all() const {
    std::lock_guard lock(mutex_);
    return got_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<transport::status> got_;
};

/// Messages one handler received.
struct inbox {
  struct message {
    peer_id from;
    std::vector<uint8_t> payload;
  };
  message_handler handler() {
    return [this](peer_id from, std::vector<uint8_t> payload) {
      std::lock_guard lock(mutex);
      got.push_back({from, std::move(payload)});
    };
  }
  size_t size() const {
    std::lock_guard lock(mutex);
    return got.size();
  }
  mutable std::mutex mutex;
  std::vector<message> got;
};

std::unique_ptr<ucx_plane> loopback_plane(peer_id id) {
  ucx_options options;
  options.tls = "tcp";
  options.net_devices = "lo";
  auto plane = ucx_plane::create(id, options);
  REQUIRE_MESSAGE(plane.is_ok(), plane.error().message);
  return std::move(plane).value();
}

void connect_both(ucx_plane& a, ucx_plane& b) {
  REQUIRE(a.connect(b.self(), b.worker_address()).is_ok());
  REQUIRE(b.connect(a.self(), a.worker_address()).is_ok());
}

/// Progresses `planes` (none when they run their own threads) until `done()`; false after `bound`.
/// The bound is generous: it only turns a hang into a failure.
template <class Done>
bool wait_until(std::initializer_list<ucx_plane*> planes, Done done, std::chrono::seconds bound = 60s) {
  const auto deadline = std::chrono::steady_clock::now() + bound;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    unsigned events = 0;
    for (ucx_plane* p : planes) events += p->progress();
    if (events == 0) std::this_thread::sleep_for(100us);
  }
  return true;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(n);
  for (auto& b : bytes) b = uint8_t(rng());
  return bytes;
}

/// FNV-1a over a byte range.
uint64_t checksum(const uint8_t* first, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ first[i]) * 1099511628211ull;
  return h;
}

bool all_ok(const std::vector<transport::status>& statuses) {
  for (const auto& s : statuses)
    if (!s.is_ok()) {
      MESSAGE(s.message);
      return false;
    }
  return true;
}

}  // namespace

TEST_SUITE("transport") {
  TEST_CASE("ucx: puts of three 64 KiB blocks land at their offsets of a 1 MiB region after a flush") {
    auto a = loopback_plane(1), b = loopback_plane(2);
    connect_both(*a, *b);
    CHECK(std::string(a->memory_path()) == "host");
    std::vector<uint8_t> pool(1 << 20, 0);
    const auto region = b->register_memory(pool.data(), pool.size());
    REQUIRE(region.is_ok());
    const uint64_t block = 64 << 10, offsets[3] = {0, 5 * block, (1 << 20) - block};
    std::vector<std::vector<uint8_t>> blocks;
    outcomes done;
    for (int i = 0; i < 3; ++i) {
      blocks.push_back(random_bytes(block, 7 + i));
      a->put(2, blocks[i].data(), block, region.value(), region->address + offsets[i], done.record());
    }
    REQUIRE(wait_until({a.get(), b.get()}, [&] { return done.size() == 3; }));
    a->flush(2, done.record());
    REQUIRE(wait_until({a.get(), b.get()}, [&] { return done.size() == 4; }));
    CHECK(all_ok(done.all()));
    for (int i = 0; i < 3; ++i) CHECK(checksum(pool.data() + offsets[i], block) == checksum(blocks[i].data(), block));
    // Nothing outside the three blocks was written.
    size_t written = 0;
    for (uint8_t x : pool) written += x != 0;
    size_t expected = 0;
    for (const auto& bytes : blocks)
      for (uint8_t x : bytes) expected += x != 0;
    CHECK(written == expected);
  }

  TEST_CASE("ucx: messages on both channels arrive whole with the sender's id (eager and rendezvous)") {
    inbox at_b, at_a;  // before the planes: their threads write here until the planes are gone
    auto a = loopback_plane(1), b = loopback_plane(2);
    connect_both(*a, *b);
    // B answers every attend with a partials message as long as the query: a send from a handler.
    b->on_message(channel::attend, [&, record = at_b.handler()](peer_id from, std::vector<uint8_t> payload) {
      const std::vector<uint8_t> answer(payload.size() % 1000 + 1, uint8_t(payload.size()));
      record(from, std::move(payload));
      b->send(from, channel::partials, answer, nullptr);
    });
    a->on_message(channel::partials, at_a.handler());
    REQUIRE(a->start_progress_thread().is_ok());
    REQUIRE(b->start_progress_thread().is_ok());

    const std::vector<uint8_t> small = {1, 2, 3}, large = random_bytes(256 << 10, 11);
    outcomes sent;
    a->send(2, channel::attend, small, sent.record());
    a->send(2, channel::attend, large, sent.record());
    REQUIRE(wait_until({}, [&] { return sent.size() == 2 && at_b.size() == 2 && at_a.size() == 2; }));
    CHECK(all_ok(sent.all()));
    std::lock_guard lock_b(at_b.mutex), lock_a(at_a.mutex);
    // Eager and rendezvous messages may overtake each other: match them by size.
    for (const auto& m : at_b.got) {
      CHECK(m.from == 1);
      CHECK((m.payload == small || m.payload == large));
    }
    CHECK(at_b.got[0].payload.size() != at_b.got[1].payload.size());
    for (const auto& m : at_a.got) {
      CHECK(m.from == 2);
      CHECK((m.payload == std::vector<uint8_t>(small.size() % 1000 + 1, uint8_t(small.size())) ||
             m.payload == std::vector<uint8_t>(large.size() % 1000 + 1, uint8_t(large.size()))));
    }
    CHECK(b->rendezvous_received() >= 1);  // 256 KiB is past tcp's eager limit
  }

  TEST_CASE("ucx: counters count exactly the bytes put and sent and nothing that was refused") {
    inbox at_b;
    auto a = loopback_plane(1), b = loopback_plane(2);
    connect_both(*a, *b);
    b->on_message(channel::attend, at_b.handler());
    b->on_message(channel::partials, at_b.handler());
    std::vector<uint8_t> pool(1 << 20);
    const auto region = b->register_memory(pool.data(), pool.size()).value();
    const auto source = random_bytes(70000, 3);
    outcomes done;
    a->put(2, source.data(), 65536, region, region.address, done.record());
    a->put(2, source.data(), 1000, region, region.address + 100000, done.record());
    a->put(2, source.data(), 65536, region, region.address + region.bytes, done.record());  // refused
    a->send(2, channel::attend, std::span(source.data(), 10), done.record());
    a->send(2, channel::partials, std::span(source.data(), 20), done.record());
    a->send(2, channel::partials, std::span(source.data(), 70000), done.record());
    a->flush(2, done.record());
    REQUIRE(wait_until({a.get(), b.get()}, [&] { return done.size() == 7 && at_b.size() == 3; }));
    const traffic t = a->counters();
    CHECK(t.put_bytes == 65536 + 1000);
    CHECK(t.message_bytes[uint8_t(channel::attend)] == 10);
    CHECK(t.message_bytes[uint8_t(channel::partials)] == 20 + 70000);
    CHECK(t.messages == 3);
    const traffic received_only = b->counters();
    CHECK(received_only.put_bytes == 0);
    CHECK(received_only.messages == 0);
  }

  TEST_CASE("ucx: a destroyed peer fails later puts and flushes with its name and is reported") {
    std::mutex mutex;
    std::vector<std::pair<peer_id, transport::status>> errors;
    auto a = loopback_plane(1), b = loopback_plane(2);
    connect_both(*a, *b);
    a->on_peer_error([&](peer_id peer, transport::status why) {
      std::lock_guard lock(mutex);
      errors.emplace_back(peer, std::move(why));
    });
    std::vector<uint8_t> pool(1 << 20), source(4096, 5);
    const auto region = b->register_memory(pool.data(), pool.size()).value();
    outcomes warm_up;  // the endpoint works before the peer goes
    a->put(2, source.data(), source.size(), region, region.address, warm_up.record());
    a->flush(2, warm_up.record());
    REQUIRE(wait_until({a.get(), b.get()}, [&] { return warm_up.size() == 2; }));
    REQUIRE(all_ok(warm_up.all()));

    b.reset();
    pool.assign(pool.size(), 0);  // what B registered is gone with it; nothing may write here now
    outcomes after;
    a->put(2, source.data(), source.size(), region, region.address, after.record());
    a->flush(2, after.record());
    REQUIRE(wait_until({a.get()}, [&] { return after.size() == 2; }));
    const auto statuses = after.all();
    CHECK_FALSE(statuses[1].is_ok());  // the flush cannot complete at a peer that is gone
    for (const auto& s : statuses)
      if (!s.is_ok()) CHECK_MESSAGE(s.message.find("peer 2") != std::string::npos, s.message);
    REQUIRE(wait_until({a.get()}, [&] {
      std::lock_guard lock(mutex);
      return !errors.empty();
    }));
    {
      std::lock_guard lock(mutex);
      CHECK(errors.size() == 1);
      CHECK(errors[0].first == 2);
      CHECK_FALSE(errors[0].second.is_ok());
    }
    // Once failed, the peer's operations are refused at once, still naming it.
    outcomes refused;
    a->flush(2, refused.record());
    REQUIRE(refused.size() == 1);
    CHECK(refused.all()[0].code == transport::status_code::io_error);
    CHECK(refused.all()[0].message.find("peer 2") != std::string::npos);
  }

  TEST_CASE("ucx: a put outside the registered region is refused before it reaches UCX") {
    auto a = loopback_plane(1), b = loopback_plane(2);
    connect_both(*a, *b);
    std::vector<uint8_t> pool(1 << 20, 0), source(64 << 10, 9);
    const auto region = b->register_memory(pool.data(), pool.size()).value();
    outcomes done;
    // Each completes before put returns, with nothing progressed: UCX never saw them.
    a->put(2, source.data(), source.size(), region, region.address + region.bytes - 1000, done.record());
    a->put(2, source.data(), source.size(), region, region.address - 1, done.record());
    a->put(2, source.data(), region.bytes + 1, region, region.address, done.record());
    a->put(99, source.data(), source.size(), region, region.address + region.bytes, done.record());  // unknown peer
    remote_region keyless = region;
    keyless.packed_key.clear();
    a->put(2, source.data(), 16, keyless, region.address, done.record());
    REQUIRE(done.size() == 5);
    for (const auto& s : done.all()) CHECK(s.code == transport::status_code::invalid_argument);
    CHECK(a->counters().put_bytes == 0);
    CHECK(std::all_of(pool.begin(), pool.end(), [](uint8_t x) { return x == 0; }));
  }

  TEST_CASE("ucx: connecting twice or to nothing is refused and a disconnected peer can be connected again") {
    inbox at_b;
    auto a = loopback_plane(1), b = loopback_plane(2);
    CHECK(a->connect(2, std::span<const uint8_t>()).code == transport::status_code::invalid_argument);
    REQUIRE(a->connect(2, b->worker_address()).is_ok());
    CHECK(a->connect(2, b->worker_address()).code == transport::status_code::invalid_argument);
    REQUIRE(a->disconnect(2).is_ok());
    outcomes refused;
    a->send(2, channel::attend, std::vector<uint8_t>{1}, refused.record());
    REQUIRE(refused.size() == 1);
    CHECK_FALSE(refused.all()[0].is_ok());
    CHECK(a->connect(2, b->worker_address()).is_ok());  // a new endpoint
    b->on_message(channel::attend, at_b.handler());
    outcomes sent;
    a->send(2, channel::attend, std::vector<uint8_t>{4, 2}, sent.record());
    REQUIRE(wait_until({a.get(), b.get()}, [&] { return sent.size() == 1 && at_b.size() == 1; }));
    CHECK(all_ok(sent.all()));
    CHECK(at_b.got[0].payload == std::vector<uint8_t>{4, 2});
  }
}
