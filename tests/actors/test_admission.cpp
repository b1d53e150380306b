// Admission decisions without CAF: which head of the queue starts, waits or is refused, and what room or
// loan it asks for meanwhile; which free blocks a new request may take; which requests backfill behind a
// long head.
#include <doctest/doctest.h>

#include "actors/admission/admission_policy.hpp"

using namespace illm::actors::admission;

namespace {

/// A head of 40 blocks on a pool of 64 in a cluster of 256, lending, with everything free.
head_facts fitting_head() {
  return head_facts{.need = 40, .capacity = 256, .pool_total = 64, .fits_here = 64, .working_set = 16};
}

/// judge_head(h), checked to say wait.
decision waiting(const head_facts& h) {
  const decision d = judge_head(h);
  CHECK(d.what == verdict::wait);
  return d;
}

}  // namespace

TEST_SUITE("actors") {
  TEST_CASE("admission: a head that fits starts; one longer than the cluster is refused once a newer view says so") {
    CHECK(judge_head(fitting_head()).what == verdict::admit);
    head_facts too_long = fitting_head();
    too_long.need = 300;
    CHECK(judge_head(too_long).what == verdict::wait);  // members may have joined since it arrived
    too_long.view_newer = true;
    CHECK(judge_head(too_long).what == verdict::refuse);
    head_facts static_multi = fitting_head();
    static_multi.lending = false;
    static_multi.capacity = 64;
    static_multi.need = 65;
    CHECK(judge_head(static_multi).what == verdict::refuse);  // without lending, the pool is all there is
  }

  TEST_CASE("admission: a head longer than the pool asks for a room keeping its working set, and starts once granted") {
    head_facts h = fitting_head();
    h.need = 100;
    const decision asked = waiting(h);
    REQUIRE(asked.room);
    CHECK(asked.room->need == 100);
    CHECK(asked.room->keep == 16);
    CHECK_FALSE(asked.loan_blocks);
    h.room_too_big = true;  // refused as too big: it keeps what fits here, asking a smaller room
    REQUIRE(judge_head(h).room);
    CHECK(judge_head(h).room->keep == 64);
    h.room_granted = true;
    h.room_keep = 16;
    CHECK(judge_head(h).what == verdict::admit);
    h.fits_here = 10;  // blocks here went to others meanwhile: below its working set it waits, asking nothing
    const decision short_here = waiting(h);
    CHECK_FALSE(short_here.room);
  }

  TEST_CASE("admission: a head that fits the pool but not what is free asks a loan while requests run here") {
    head_facts h = fitting_head();
    h.fits_here = 30;
    const decision busy = waiting(h);
    REQUIRE(busy.loan_blocks);
    CHECK(*busy.loan_blocks == 10);
    h.rooms_running = true;  // the pool is a long request's: no loan of its blocks
    CHECK_FALSE(judge_head(h).loan_blocks);
    h.rooms_running = false;
    h.idle = true;  // nothing runs here whose end frees blocks: a room for what does not fit
    const decision idle = judge_head(h);
    REQUIRE(idle.room);
    CHECK(idle.room->keep == 30);
    CHECK_FALSE(idle.loan_blocks);
    h.lending = false;
    CHECK(judge_head(h).what == verdict::wait);
    CHECK_FALSE(judge_head(h).room);
  }

  TEST_CASE("admission: a new request's free blocks leave out the running requests' growth, held blocks and rooms") {
    pool_facts p;
    p.total = 64;
    p.free = 50;
    p.promised = 10;
    p.held_for_room = 5;
    CHECK(blocks_for_new(p, 20, false) == 35);
    CHECK(blocks_for_new(p, 20, true) == 40);  // the request the blocks were held for
    p.tracks_rooms = true;
    p.rooms = 30;
    CHECK(blocks_for_new(p, 20, false) == 35);  // it fits the pool whole: it may use a room's blocks meanwhile
    CHECK(blocks_for_new(p, 100, false) == 5);  // a long request's part here may not
    p.rooms_overdrawn = true;
    CHECK(blocks_for_new(p, 20, false) == 5);  // a room already waits for them
    p.promised = 60;
    CHECK(blocks_for_new(p, 20, false) == 0);
  }

  TEST_CASE("admission: behind a long head, requests that fit whole and leave its part here backfill") {
    CHECK(head_keeps(40, 64, false, 0, 16) == 0);    // the head fits the pool: no backfill
    CHECK(head_keeps(100, 64, false, 0, 16) == 16);  // its working set
    CHECK(head_keeps(100, 64, true, 24, 16) == 24);  // what its granted room has it keep
    CHECK(may_backfill(10, 64, 16, 30));
    CHECK_FALSE(may_backfill(20, 64, 16, 30));
    CHECK_FALSE(may_backfill(70, 64, 0, 100));  // longer than the pool
    CHECK(working_set(512, 64) == 32);
    CHECK(working_set(512, 40) == 20);
    CHECK(blocks_needed(17, 15) == 2);
  }
}
