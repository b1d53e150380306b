// Planes made by name: inproc planes of one group reach each other, the sim plane times its puts and moves
// nothing, an unknown kind is an error naming the kinds this build has, and ucx is listed exactly when built.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>

#include "transport/registry.hpp"

using namespace illm;
using namespace illm::transport;

TEST_SUITE("transport") {
  TEST_CASE("the registry makes inproc planes of one group that reach each other") {
    const auto group = make_plane_group("inproc");
    REQUIRE(group);
    auto a = make_plane("inproc", {.self = 1, .group = group});
    auto b = make_plane("inproc", {.self = 2, .group = group});
    REQUIRE(a.is_ok());
    REQUIRE(b.is_ok());
    CHECK(a.value()->address().empty());  // in-process: nothing to exchange
    std::vector<uint8_t> memory(32, 0), source(8, 5);
    const remote_region region = b.value()->register_memory(memory.data(), memory.size()).value();
    bool done = false;
    a.value()->put(2, source.data(), 8, region, region.address + 8, [&](status s) { done = s.is_ok(); });
    CHECK(done);
    CHECK(memory[8] == 5);
    CHECK(memory[16] == 0);
    CHECK_FALSE(make_plane("inproc", {.self = 1, .group = group}).is_ok());  // the id is taken
    CHECK_FALSE(make_plane("inproc", {.self = 3}).is_ok());                 // no group
  }

  TEST_CASE("the registry's sim plane completes puts by its timer and copies nothing") {
    uint64_t timed = 0;
    auto plane = make_plane("sim", {.self = 4, .timer = [&](peer_id, peer_id, uint64_t bytes, completion done) {
                                      timed += bytes;
                                      done(status::ok());
                                    }});
    REQUIRE(plane.is_ok());
    std::vector<uint8_t> memory(16, 0), source(16, 9);
    bool done = false;
    plane.value()->put(5, source.data(), 16, {}, reinterpret_cast<uint64_t>(memory.data()),
                       [&](status s) { done = s.is_ok(); });
    CHECK(done);
    CHECK(timed == 16);
    CHECK(memory[0] == 0);
    CHECK(plane.value()->counters().put_bytes == 16);
  }

  TEST_CASE("an unknown plane is an error that names the kinds this build has") {
    auto none = make_plane("carrier-pigeon", {});
    REQUIRE_FALSE(none.is_ok());
    CHECK(none.error().message.find("inproc") != std::string::npos);
    CHECK(none.error().message.find("carrier-pigeon") != std::string::npos);
    const auto kinds = plane_kinds();
    CHECK(std::count(kinds.begin(), kinds.end(), "inproc") == 1);
    CHECK(std::count(kinds.begin(), kinds.end(), "sim") == 1);
    const bool ucx_listed = std::count(kinds.begin(), kinds.end(), "ucx") == 1;
    auto ucx = make_plane("ucx", {.self = 9});
    CHECK(ucx_listed == ucx.is_ok());  // a build without UCX says so when asked for one
    if (!ucx.is_ok()) CHECK(ucx.error().code == status_code::unsupported);
  }
}
