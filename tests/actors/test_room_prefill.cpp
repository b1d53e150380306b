// The owner's plan of a room prefill: whole chunks in prompt order, the owner keeping the last tokens; a
// chunk goes out only once the one before it has started, to the holder with the most room left that has
// none under way; a refusing holder gets no more, its chunk's positions going to the next one.
#include <doctest/doctest.h>

#include "actors/room_prefill.hpp"

using namespace illm::actors;

TEST_SUITE("actors") {
  TEST_CASE("a room prefill covers whole chunks the room can hold, and only when enough go out") {
    const std::vector<std::pair<uint32_t, uint32_t>> holders{{1, 60}, {2, 60}, {3, 60}};
    auto plan = room_prefill_plan::make(0, 2900, 128, holders, 2);
    REQUIRE(plan);
    CHECK(plan->covered() == 0);
    CHECK_FALSE(plan->finished());
    // Each holder takes 7 whole chunks of 8 blocks; the prompt has 22 whole chunks before its last token.
    int chunks = 0;
    for (uint64_t id = 1; auto c = plan->next(); ++id) {
      CHECK(c->pos0 == 128 * chunks);
      CHECK(c->end == c->pos0 + 128);
      CHECK(c->blocks == 8);
      plan->asked(id, *c);
      plan->started(id);
      plan->committed(id);
      ++chunks;
    }
    CHECK(chunks == 21);
    CHECK(plan->finished());
    CHECK(plan->covered() == 21 * 128);
    CHECK(room_prefill_plan::make(0, 2900, 128, {{1, 20}}, 2));  // two chunks' worth of room
    CHECK_FALSE(room_prefill_plan::make(0, 2900, 128, {{1, 15}}, 2));  // room for one chunk only
    CHECK_FALSE(room_prefill_plan::make(0, 200, 128, holders, 2));     // one whole chunk before the last token
    CHECK_FALSE(room_prefill_plan::make(0, 2900, 100, holders, 2));    // not whole blocks
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
