// The owner's plan of a room prefill: chunks in prompt order over all the room holds, the owner keeping the
// last tokens; a chunk goes out only once the one before it has started, to the holder with the most room
// left that has none under way; a refusing holder gets no more, its chunk's positions going to the next.
#include <doctest/doctest.h>

#include <map>

#include "actors/logic/room_prefill.hpp"

using namespace illm::actors;

TEST_SUITE("actors") {
  TEST_CASE("a room prefill covers what the room holds in chunks, and only when enough goes out") {
    const std::vector<std::pair<uint32_t, uint32_t>> holders{{1, 60}, {2, 60}, {3, 60}};
    auto plan = room_prefill_plan::make(0, 2900, 128, holders, 2);
    REQUIRE(plan);
    CHECK(plan->covered() == 0);
    CHECK_FALSE(plan->finished());
    // The room holds 180 blocks (2880 tokens) of the prompt's 2896 whole-block tokens before its last one:
    // chunks of 8 blocks, each holder's last of the 4 it has left.
    int32_t at = 0;
    std::map<uint32_t, uint32_t> given;
    for (uint64_t id = 1; auto c = plan->next(); ++id) {
      CHECK(c->pos0 == at);
      CHECK(c->end - c->pos0 == int32_t(c->blocks) * 16);
      CHECK((c->blocks == 8 || c->blocks == 4));
      given[c->holder] += c->blocks;
      at = c->end;
      plan->asked(id, *c);
      plan->started(id);
      plan->committed(id);
    }
    CHECK(at == 2880);
    CHECK(given == std::map<uint32_t, uint32_t>{{1, 60}, {2, 60}, {3, 60}});
    CHECK(plan->finished());
    CHECK(plan->covered() == 2880);
    // A room larger than the prompt: the holders take all but its last block's tokens.
    auto roomy = room_prefill_plan::make(0, 1000, 128, {{1, 100}}, 2);
    REQUIRE(roomy);
    for (uint64_t id = 1; auto c = roomy->next(); ++id) {
      roomy->asked(id, *c);
      roomy->started(id);
      roomy->committed(id);
    }
    CHECK(roomy->covered() == 992);
    CHECK(room_prefill_plan::make(0, 2900, 128, {{1, 9}}, 2));          // more than one chunk's worth of room
    CHECK_FALSE(room_prefill_plan::make(0, 2900, 128, {{1, 8}}, 2));    // one chunk's worth only
    CHECK_FALSE(room_prefill_plan::make(0, 140, 128, holders, 2));      // one chunk's worth of prompt
    CHECK_FALSE(room_prefill_plan::make(0, 2900, 100, holders, 2));     // not whole blocks
  }

  TEST_CASE("a chunk goes out once the one before has started, to a free holder with the most room left") {
    auto plan = room_prefill_plan::make(0, 4000, 128, {{1, 40}, {2, 64}, {3, 24}}, 2);
    REQUIRE(plan);
    auto first = plan->next();
    REQUIRE(first);
    CHECK(first->holder == 2);  // the most room left
    plan->asked(10, *first);
    CHECK_FALSE(plan->next());  // not started yet
    plan->started(10);
    auto second = plan->next();
    REQUIRE(second);
    CHECK(second->holder == 1);  // holder 2 has a chunk under way
    CHECK(second->pos0 == 128);
    plan->asked(11, *second);
    plan->started(11);
    auto third = plan->next();
    REQUIRE(third);
    CHECK(third->holder == 3);
    plan->asked(12, *third);
    plan->started(12);
    CHECK_FALSE(plan->next());  // every holder has one under way
    CHECK(plan->under_way().size() == 3);
    CHECK(plan->holder_of(11) == 1);
    plan->committed(10);
    auto fourth = plan->next();
    REQUIRE(fourth);
    CHECK(fourth->holder == 2);
    CHECK(fourth->pos0 == 3 * 128);
  }

  TEST_CASE("a refusing holder gets no more chunks; the owner takes over when no holder can") {
    auto plan = room_prefill_plan::make(0, 4000, 128, {{1, 16}, {2, 8}}, 2);
    REQUIRE(plan);
    auto c = plan->next();
    REQUIRE(c);
    CHECK(c->holder == 1);
    plan->asked(1, *c);
    plan->refused(1);
    c = plan->next();
    REQUIRE(c);
    CHECK(c->holder == 2);
    CHECK(c->pos0 == 0);  // the refused chunk's positions
    plan->asked(2, *c);
    plan->started(2);
    CHECK(plan->stalled());  // holder 2's room is used up, holder 1 refuses
    CHECK_FALSE(plan->finished());  // chunk 2 is under way
    plan->committed(2);
    CHECK(plan->finished());
    CHECK(plan->covered() == 128);  // the owner prefills from there
  }
}
