// The books of `illm chaos` can say no: each request is judged from what the instances sent it (below the request
// actor's de-duplication), and a defect planted in the runtime on purpose lands in its column and turns the run red.
#include <doctest/doctest.h>

#include "actors/chaos/chaos.hpp"
#include "tests/actors/support.hpp"

using namespace illm;
using namespace illm::actors;
using actors::chaos::client_view;
using actors::chaos::judge;
using kind = delivery::kind;

namespace {

const std::vector<int32_t> answer{10, 11, 12, 13};

delivery served(instance_id at, int32_t position) { return {1, kind::served_by, at, 0, position, {}}; }
delivery token(instance_id at, int32_t t) { return {1, kind::token, at, t, 0, {}}; }
delivery ended(instance_id at, const std::string& reason) { return {1, kind::end, at, 0, 0, reason}; }

}  // namespace

TEST_CASE("books: a request served by one instance, then another from its third token, is judged whole") {
  const std::vector<delivery> d{served(0, 0), token(0, 10), token(0, 11), served(2, 2), ended(0, "cancelled"),
                                token(2, 12), token(2, 13), ended(2, "length")};
  const auto v = judge(d, {answer, 1, "length", ""}, 4, answer);
  CHECK(v.problems.empty());
  CHECK(v.completed);
  CHECK_FALSE((v.lost || v.duplicated || v.mismatched || v.extra_tokens));
}

TEST_CASE("books: what the request actor would filter is still counted") {
  SUBCASE("a second end") {
    const auto v = judge({served(0, 0), token(0, 10), token(0, 11), token(0, 12), token(0, 13), ended(0, "length"),
                          ended(0, "length")},
                         {answer, 1, "length", ""}, 4, answer);
    CHECK(v.duplicated);
  }
  SUBCASE("a token past max_tokens, and one after the end") {
    const auto v = judge({served(0, 0), token(0, 10), token(0, 11), token(0, 12), token(0, 13), token(0, 14),
                          ended(0, "length"), token(0, 15)},
                         {answer, 1, "length", ""}, 4, answer);
    CHECK(v.extra_tokens == 2);
  }
  SUBCASE("a token from an instance that never served it") {
    const auto v = judge({served(0, 0), token(0, 10), token(1, 11), token(0, 11), token(0, 12), token(0, 13),
                          ended(0, "length")},
                         {answer, 1, "length", ""}, 4, answer);
    CHECK(v.extra_tokens == 1);
  }
  SUBCASE("a wrong token from the instance the request left, sent after it left") {
    const auto v = judge({served(0, 0), token(0, 10), served(2, 1), token(0, 99), token(2, 11), token(2, 12),
                          token(2, 13), ended(2, "length")},
                         {answer, 1, "length", ""}, 4, answer);
    CHECK(v.mismatched);
    CHECK_FALSE(v.extra_tokens);
  }
  SUBCASE("a left-behind instance that answers instead of acknowledging the cancel") {
    const auto v = judge({served(0, 0), token(0, 10), served(2, 1), ended(0, "error"), token(2, 11), token(2, 12),
                          token(2, 13), ended(2, "length")},
                         {answer, 1, "length", ""}, 4, answer);
    CHECK(v.duplicated);
  }
  SUBCASE("a length answer short of its tokens") {
    const auto v = judge({served(0, 0), token(0, 10), token(0, 11), served(2, 3), token(2, 13), ended(2, "length")},
                         {{10, 11, 13}, 1, "length", ""}, 4, answer);
    CHECK(v.mismatched);
  }
  SUBCASE("a failed request's tokens must be a prefix of the fault-free answer") {
    const auto v = judge({served(0, 0), token(0, 10), token(0, 12), ended(0, "error")}, {{10, 12}, 1, "error", ""}, 4, answer);
    CHECK(v.failed);
    CHECK(v.mismatched);
  }
  SUBCASE("nothing ended it, though its client was told") {
    const auto v = judge({served(0, 0), token(0, 10)}, {{10}, 1, "error", ""}, 4, answer);
    CHECK(v.lost);
  }
  SUBCASE("what came while the harness stopped the cluster counts, but for the cancellations the stop causes") {
    const auto lost = judge({served(0, 0), token(0, 10), ended(0, "cancelled")}, {{10}, 0, "", ""}, 4, answer, 2);
    CHECK(lost.lost);  // never answered: the stop's cancellation hides nothing
    const auto twice = judge({served(0, 0), token(0, 10), token(0, 11), token(0, 12), token(0, 13), ended(0, "length"),
                              ended(0, "length")},
                             {answer, 1, "length", ""}, 4, answer, 6);
    CHECK(twice.duplicated);  // a second end sent late
  }
  SUBCASE("an end the request actor decided itself is an answer") {
    const auto v = judge({served(0, 0), token(0, 10), ended(delivery::front_end, "error")}, {{10}, 1, "error", ""}, 4, answer);
    CHECK(v.failed);
    CHECK_FALSE((v.lost || v.duplicated || v.mismatched));
  }
}

TEST_CASE("books: each defect planted in the instances lands in its column and turns the run red") {
  const actors::chaos::scenario* s = actors::chaos::find_scenario("kill-holder");
  REQUIRE(s);
  actors::chaos::chaos_options o;
  o.short_requests = 2;
  const auto clean = actors::chaos::run(test::stories15m(), *s, 1, o);
  for (const std::string& p : clean.problems) MESSAGE(p);
  REQUIRE(clean.tally.clean());
  struct plant {
    planted_defect defect;
    uint64_t actors::chaos::books::*column;
  };
  for (const plant p : {plant{planted_defect::second_end, &actors::chaos::books::duplicated},
                        plant{planted_defect::wrong_token, &actors::chaos::books::mismatched},
                        plant{planted_defect::token_past_max, &actors::chaos::books::extra_tokens},
                        plant{planted_defect::leaked_block, &actors::chaos::books::leaked_blocks},
                        plant{planted_defect::failed_fitting, &actors::chaos::books::unjustified_failed}}) {
    CAPTURE(to_string(p.defect));
    o.plant = p.defect;
    const auto r = actors::chaos::run(test::stories15m(), *s, 1, o);
    CHECK(r.tally.*p.column > 0);
    CHECK_FALSE(r.tally.clean());
    CHECK_FALSE(r.problems.empty());
  }
}
