// The fault-injecting plane: its spec is read with clear errors, it injects the faults the spec asks for
// and counts them, the same seed injects the same faults in the same order, and a partitioned peer is cut
// off both ways. No test reads a clock: delayed messages are waited for, not timed.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/transport/cut_off.hpp"
#include "transport/faulty/faulty_plane.hpp"
#include "transport/registry.hpp"

using namespace illm;
using namespace illm::transport;

namespace {

/// Two inproc endpoints, 1 faulty by `faults`, 2 plain; what 2 receives on the attend channel, in order.
struct faulty_pair {
  explicit faulty_pair(const std::string& faults) {
    auto group = make_plane_group("inproc");
    a = make_plane("faulty:inproc", {.self = 1, .group = group, .faults = faults}).value();
    b = make_plane("inproc", {.self = 2, .group = group}).value();
    b->on_message(channel::attend, [this](peer_id, std::vector<uint8_t> bytes) {
      std::lock_guard lock(mutex);
      got.push_back(bytes.at(0));
    });
  }
  /// Sends messages 0..n-1 from 1 to 2; returns how many completions said ok by then (a delayed message's
  /// completes when it is sent).
  int send_all(int n) {
    auto ok = std::make_shared<std::atomic<int>>(0);
    for (int i = 0; i < n; ++i)
      a->send(2, channel::attend, std::vector<uint8_t>{uint8_t(i)}, [ok](transport::status s) { *ok += s.is_ok(); });
    return ok->load();
  }
  std::vector<uint8_t> received() {
    std::lock_guard lock(mutex);
    return got;
  }
  fault_counts injected() { return dynamic_cast<faulty_plane&>(*a).injected(); }

  std::shared_ptr<data_plane> a, b;
  std::mutex mutex;
  std::vector<uint8_t> got;
};

}  // namespace

TEST_SUITE("transport") {
  TEST_CASE("a fault spec is read back as written and a wrong one is an error naming what is wrong") {
    auto spec = parse_fault_spec("seed=7,put.fail=0.25,send.dup=0.5,delay_ms=3,partition=2+5");
    REQUIRE(spec.is_ok());
    CHECK(spec->seed == 7);
    CHECK(spec->put_fail == 0.25);
    CHECK(spec->send_duplicate == 0.5);
    CHECK(spec->delay == std::chrono::milliseconds(3));
    CHECK(spec->partitioned == std::vector<peer_id>{2, 5});
    CHECK(describe(spec.value()) == "seed=7,delay_ms=3,put.fail=0.25,send.dup=0.5,partition=2+5");
    CHECK(parse_fault_spec("").is_ok());  // no faults
    for (const char* wrong : {"put.fail=2", "send.drop=x", "seed", "tornado=1", "partition=a", "delay_ms=-1"}) {
      auto bad = parse_fault_spec(wrong);
      REQUIRE_FALSE(bad.is_ok());
      CHECK_MESSAGE(bad.error().message.find("fault spec") != std::string::npos, wrong);
    }
    CHECK(parse_fault_spec("tornado=1").error().message.find("send.dup") != std::string::npos);  // lists the keys
    CHECK_FALSE(make_plane("faulty:inproc", {.faults = "put.fail=7"}).is_ok());
    CHECK_FALSE(make_plane("faulty:carrier-pigeon", {}).is_ok());
  }

  TEST_CASE("dropped and failed messages are counted as injected and the rest arrive in order") {
    faulty_pair p("seed=3,send.drop=0.2,send.fail=0.1");
    const int ok = p.send_all(200);
    const fault_counts n = p.injected();
    const auto got = p.received();
    CHECK(n.at("send_drop") > 0);
    CHECK(n.at("send_fail") > 0);
    CHECK(uint64_t(ok) == 200 - n.at("send_fail"));  // a dropped message's completion says ok
    CHECK(got.size() == 200 - n.at("send_fail") - n.at("send_drop"));
    CHECK(std::is_sorted(got.begin(), got.end()));
  }

  TEST_CASE("the same seed injects the same faults and another seed others") {
    auto run = [](const std::string& faults) {
      faulty_pair p(faults);
      p.send_all(200);
      return p.received();
    };
    const auto first = run("seed=11,send.drop=0.3,send.dup=0.2");
    CHECK(first == run("seed=11,send.drop=0.3,send.dup=0.2"));
    CHECK(first != run("seed=12,send.drop=0.3,send.dup=0.2"));
    CHECK(first.size() > 100);  // duplicates arrive twice, next to each other
    CHECK(std::adjacent_find(first.begin(), first.end()) != first.end());
  }

  TEST_CASE("delayed messages arrive after later ones that were not delayed") {
    faulty_pair p("seed=5,send.delay=0.5,delay_ms=5");
    p.send_all(50);
    for (int i = 0; i < 10000 && p.received().size() < 50; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    auto got = p.received();
    REQUIRE(got.size() == 50);
    CHECK_FALSE(std::is_sorted(got.begin(), got.end()));
    std::sort(got.begin(), got.end());
    for (int i = 0; i < 50; ++i) CHECK(got[size_t(i)] == i);
    CHECK(p.injected().at("send_delay") > 0);
  }

  TEST_CASE("a faulty endpoint whose handler was removed refuses messages instead of calling nothing") {
    auto group = make_plane_group("inproc");
    auto sender = make_plane("inproc", {.self = 1, .group = group}).value();
    auto stopped = make_plane("faulty:inproc", {.self = 2, .group = group, .faults = "seed=1,send.dup=0.5"}).value();
    stopped->on_message(channel::attend, [](peer_id, std::vector<uint8_t>) {});
    stopped->on_message(channel::attend, nullptr);  // as a stopped instance does
    transport::status got = transport::status::ok();
    sender->send(2, channel::attend, std::vector<uint8_t>{7}, [&got](transport::status s) { got = s; });
    CHECK_FALSE(got.is_ok());  // refused with a reason, and nothing crashed
  }

  TEST_CASE("a partitioned peer is cut off both ways and a put that fails or is dropped writes nothing") {
    auto group = make_plane_group("inproc");
    auto a = make_plane("faulty:inproc", {.self = 1, .group = group, .faults = "partition=2"}).value();
    auto b = make_plane("inproc", {.self = 2, .group = group}).value();
    auto c = make_plane("faulty:inproc", {.self = 3, .group = group, .faults = "put.fail=0.5,put.drop=0.5"}).value();
    std::vector<uint8_t> memory(64, 0), source(16, 7);
    const remote_region region = b->register_memory(memory.data(), memory.size()).value();
    CHECK(transport::test::failed_operations(*a, 2, region, source.data(), 16) == 3);
    int heard = 0;
    a->on_message(channel::attend, [&](peer_id, std::vector<uint8_t>) { ++heard; });
    b->send(1, channel::attend, std::vector<uint8_t>{1}, [](transport::status) {});
    CHECK(heard == 0);  // 2's message to 1 never arrives
    CHECK(dynamic_cast<faulty_plane&>(*a).injected().at("partition") == 4);
    int failed = 0;
    for (int i = 0; i < 20; ++i)
      c->put(2, source.data(), 16, region, region.address, [&](transport::status s) { failed += !s.is_ok(); });
    CHECK(std::all_of(memory.begin(), memory.end(), [](uint8_t x) { return x == 0; }));
    const fault_counts n = dynamic_cast<faulty_plane&>(*c).injected();
    CHECK(n.at("put_fail") + n.at("put_drop") == 20);
    CHECK(failed == int(n.at("put_fail")));
  }

  TEST_CASE("a partition started while the plane runs cuts its peers off until it heals") {
    auto group = make_plane_group("inproc");
    auto a = make_plane("faulty:inproc", {.self = 1, .group = group, .faults = "seed=1"}).value();
    auto b = make_plane("inproc", {.self = 2, .group = group}).value();
    auto& faulty = dynamic_cast<faulty_plane&>(*a);
    int heard = 0, failed = 0;
    a->on_message(channel::attend, [&](peer_id, std::vector<uint8_t>) { ++heard; });
    b->on_message(channel::attend, [](peer_id, std::vector<uint8_t>) {});
    auto both_ways = [&] {
      a->send(2, channel::attend, std::vector<uint8_t>{1}, [&](transport::status s) { failed += !s.is_ok(); });
      b->send(1, channel::attend, std::vector<uint8_t>{1}, [](transport::status) {});
    };
    faulty.partition_for({2}, std::chrono::hours(1));
    both_ways();
    CHECK(failed == 1);
    CHECK(heard == 0);
    CHECK(faulty.injected().at("partition") == 2);
    faulty.partition_for({2}, std::chrono::milliseconds(0));  // healed
    both_ways();
    CHECK(failed == 1);
    CHECK(heard == 1);
  }
}
