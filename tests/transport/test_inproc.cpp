// The in-process data plane: puts land in registered memory and only there, messages reach the
// peer's handler with the sender's id, counters count the bytes, and a peer that left fails every
// operation towards it.
#include <doctest/doctest.h>

#include "tests/transport/cut_off.hpp"
#include "transport/inproc/inproc.hpp"

using namespace illm;
using namespace illm::transport;

TEST_SUITE("transport") {
  TEST_CASE("a put lands in the peer's registered memory and counts its bytes") {
    auto fabric = std::make_shared<inproc_fabric>();
    auto a = fabric->connect(1).value(), b = fabric->connect(2).value();
    std::vector<uint8_t> memory(64, 0), source(16, 7);
    const remote_region region = b->register_memory(memory.data(), memory.size()).value();
    transport::status result{transport::status_code::internal, "not called"};
    a->put(2, source.data(), 16, region, region.address + 32, [&](transport::status s) { result = s; });
    CHECK(result.is_ok());
    CHECK(memory[32] == 7);
    CHECK(memory[47] == 7);
    CHECK(memory[48] == 0);
    CHECK(a->counters().put_bytes == 16);
    bool flushed = false;
    a->flush(2, [&](transport::status s) { flushed = s.is_ok(); });
    CHECK(flushed);
  }

  TEST_CASE("a put outside the region or with a wrong key fails and writes nothing") {
    auto fabric = std::make_shared<inproc_fabric>();
    auto a = fabric->connect(1).value(), b = fabric->connect(2).value();
    std::vector<uint8_t> memory(64, 0), source(16, 7);
    remote_region region = b->register_memory(memory.data(), memory.size()).value();
    transport::status result;
    a->put(2, source.data(), 16, region, region.address + 56, [&](transport::status s) { result = s; });
    CHECK_FALSE(result.is_ok());
    region.packed_key = {9, 9, 9, 9};
    a->put(2, source.data(), 16, region, region.address, [&](transport::status s) { result = s; });
    CHECK_FALSE(result.is_ok());
    CHECK(std::all_of(memory.begin(), memory.end(), [](uint8_t x) { return x == 0; }));
  }

  TEST_CASE("messages reach the handler of their channel with the sender's id") {
    auto fabric = std::make_shared<inproc_fabric>();
    auto a = fabric->connect(1).value(), b = fabric->connect(2).value();
    peer_id from = 0;
    std::vector<uint8_t> got;
    b->on_message(channel::attend, [&](peer_id p, std::vector<uint8_t> bytes) {
      from = p;
      got = std::move(bytes);
    });
    const std::vector<uint8_t> payload = {1, 2, 3};
    transport::status result;
    a->send(2, channel::attend, payload, [&](transport::status s) { result = s; });
    CHECK(result.is_ok());
    CHECK(from == 1);
    CHECK(got == payload);
    CHECK(a->counters().message_bytes[uint8_t(channel::attend)] == 3);
    a->send(2, channel::partials, payload, [&](transport::status s) { result = s; });  // no handler there
    CHECK_FALSE(result.is_ok());
  }

  TEST_CASE("a peer that left fails every operation towards it") {
    auto fabric = std::make_shared<inproc_fabric>();
    auto a = fabric->connect(1).value();
    auto b = fabric->connect(2).value();
    std::vector<uint8_t> memory(64);
    const remote_region region = b->register_memory(memory.data(), memory.size()).value();
    fabric->disconnect(2);
    CHECK(transport::test::failed_operations(*a, 2, region, memory.data(), 8) == 3);
    CHECK_FALSE(fabric->connect(1).is_ok());  // ids are unique
  }
}
