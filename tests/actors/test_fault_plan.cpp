// A fault plan (--faults) splits one spec into the data plane's faults and the control plane's, refuses bad
// keys and values by name, and the control plane's draws follow the seed and are counted by kind.
#include <doctest/doctest.h>

#include "actors/faults/control_faults.hpp"
#include "actors/faults/fault_plan.hpp"

using namespace illm::actors::faults;

namespace {

/// The fates of the next n draws at a point.
std::vector<fate> draws(control_faults& f, control_point p, int n) {
  std::vector<fate> out;
  for (int i = 0; i < n; ++i) out.push_back(f.draw(p));
  return out;
}

}  // namespace

TEST_SUITE("actors") {
  TEST_CASE("a fault plan splits the data plane's faults from the control plane's") {
    auto plan = parse_fault_plan("seed=7,send.drop=0.02,heartbeat.drop=0.1,reply.dup=0.5,promise.delay=1,delay_ms=30");
    REQUIRE(plan.is_ok());
    CHECK(plan->data_faults);
    CHECK(plan->data.seed == 7);
    CHECK(plan->data.send_drop == doctest::Approx(0.02));
    CHECK(plan->data.delay.count() == 30);
    CHECK(plan->data_text.find("heartbeat") == std::string::npos);
    CHECK(plan->control.drop[int(control_point::heartbeat)] == doctest::Approx(0.1));
    CHECK(plan->control.duplicate[int(control_point::reply)] == doctest::Approx(0.5));
    CHECK(plan->control.delay_chance[int(control_point::promise)] == doctest::Approx(1.0));
    CHECK(plan->data_text_for(1) != plan->data_text_for(2));  // each endpoint draws from a seed of its own

    auto control_only = parse_fault_plan("seed=3,reply.drop=0.2");
    REQUIRE(control_only.is_ok());
    CHECK_FALSE(control_only->data_faults);  // the plane is not wrapped
    CHECK(control_only->control.any());
    CHECK(parse_fault_plan("").value().empty());
  }

  TEST_CASE("a bad fault plan is refused by the key or value at fault") {
    auto unknown = parse_fault_plan("seed=1,bogus=2");
    REQUIRE_FALSE(unknown.is_ok());
    CHECK(unknown.error().message().find("bogus") != std::string::npos);
    CHECK(unknown.error().message().find("heartbeat") != std::string::npos);  // the control keys are listed too
    auto fault = parse_fault_plan("reply.lose=0.1");
    REQUIRE_FALSE(fault.is_ok());
    CHECK(fault.error().message().find("drop, dup, delay and drop_first") != std::string::npos);
    auto chance = parse_fault_plan("heartbeat.drop=1.5");
    REQUIRE_FALSE(chance.is_ok());
    CHECK(chance.error().message().find("from 0 to 1") != std::string::npos);
    auto point = parse_fault_plan("crash=mid_flight");
    REQUIRE_FALSE(point.is_ok());
    CHECK(point.error().message().find("mid_move, mid_room and after_order") != std::string::npos);
    CHECK_FALSE(parse_fault_plan("crash=mid_move@0").is_ok());
    CHECK_FALSE(parse_fault_plan("crash=mid_move@x").is_ok());
  }

  TEST_CASE("a crash point fires once, the time the plan names") {
    auto plan = parse_fault_plan("crash=mid_move@3,order.dup=0.5");
    REQUIRE(plan.is_ok());
    CHECK(plan->in_actors());
    CHECK_FALSE(plan->data_faults);
    CHECK(plan->crash == crash_point::mid_move);
    CHECK(plan->crash_at == 3);
    CHECK(plan->control.duplicate[int(control_point::order)] == doctest::Approx(0.5));
    control_faults f(plan.value());
    CHECK_FALSE(f.crash_now(crash_point::mid_room));  // another point
    std::vector<bool> fired;
    for (int i = 0; i < 5; ++i) fired.push_back(f.crash_now(crash_point::mid_move));
    CHECK(fired == std::vector<bool>{false, false, true, false, false});
    CHECK(f.injected().at("crash_mid_move") == 1);
    CHECK(parse_fault_plan("crash=after_order").value().crash_at == 1);
  }

  TEST_CASE("drop_first loses the first messages at a point for sure, then the chances apply") {
    auto plan = parse_fault_plan("reply.drop_first=2,reply.dup=1");
    REQUIRE(plan.is_ok());
    CHECK(plan->control.any());
    control_faults f(plan.value());
    CHECK(draws(f, control_point::reply, 4) == std::vector<fate>{fate::drop, fate::drop, fate::duplicate, fate::duplicate});
    CHECK(draws(f, control_point::promise, 1) == std::vector<fate>{fate::pass});  // a point of its own
    CHECK(f.injected().at("reply_drop") == 2);
    CHECK_FALSE(parse_fault_plan("reply.drop_first=-1").is_ok());
    CHECK_FALSE(parse_fault_plan("reply.drop_first=0.5").is_ok());
    CHECK(check_role(parse_fault_plan("order.drop_first=1").value(), fault_role::instance).code() ==
          illm::gpu::status_code::invalid_argument);
  }

  TEST_CASE("control faults follow their seed and are counted by kind") {
    auto plan = [](int seed) {
      return parse_fault_plan("heartbeat.drop=0.3,heartbeat.dup=0.3,reply.delay=1,delay_ms=5,seed=" +
                              std::to_string(seed))
          .value();
    };
    control_faults a(plan(11)), b(plan(11)), c(plan(12));
    const auto seen = draws(a, control_point::heartbeat, 200);
    CHECK(seen == draws(b, control_point::heartbeat, 200));  // replayable
    CHECK(seen != draws(c, control_point::heartbeat, 200));
    const auto counts = a.injected();
    const uint64_t dropped = uint64_t(std::count(seen.begin(), seen.end(), fate::drop));
    CHECK(dropped > 30);
    CHECK(counts.at("heartbeat_drop") == dropped);
    CHECK(counts.at("heartbeat_duplicate") == uint64_t(std::count(seen.begin(), seen.end(), fate::duplicate)));
    CHECK(a.draw(control_point::reply) == fate::delay);
    CHECK(a.draw(control_point::promise) == fate::pass);  // no fault asked there
    CHECK(a.injected().at("reply_delay") == 1);
  }
}
