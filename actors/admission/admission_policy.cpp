#include "actors/admission/admission_policy.hpp"

#include <algorithm>

namespace illm::actors::admission {

uint32_t blocks_for_new(const pool_facts& pool, uint32_t need, bool granted) {
  const uint32_t held = granted ? 0 : pool.held_for_room;
  const uint32_t unpromised = pool.free - std::min(pool.free, pool.promised + held);
  if (!pool.tracks_rooms || (need <= pool.total && !pool.rooms_overdrawn)) return unpromised;
  return unpromised - std::min(unpromised, pool.rooms);
}

namespace {

/// A head with a granted room starts once it can keep its part here; else it asks for a room.
decision start_or_ask_room(const head_facts& h, uint32_t keep_if_asking) {
  if (h.room_granted) return {h.fits_here >= h.room_keep ? verdict::admit : verdict::wait, {}, {}};
  return {verdict::wait, room_ask{h.need, keep_if_asking}, {}};
}

}  // namespace

decision judge_head(const head_facts& h) {
  if (h.need > h.capacity) return {!h.lending || h.view_newer ? verdict::refuse : verdict::wait, {}, {}};
  if (h.need <= h.fits_here) return {verdict::admit, {}, {}};
  if (h.lending && h.need > h.pool_total) {
    // It keeps its working set here and the rest in a room, where its full blocks go as it grows; when the
    // others cannot hold that much, it keeps what fits here and asks a smaller room. A room granted while
    // blocks here went to others waits for them.
    if (h.fits_here < h.working_set) return {};
    return start_or_ask_room(h, h.room_too_big ? std::min(h.fits_here, h.need - 1) : h.working_set);
  }
  // Nothing runs here whose end would free blocks (the pool holds others' KV): it keeps what fits here and
  // asks a room for the rest, rather than wait for requests elsewhere to end.
  if (h.lending && h.idle && h.fits_here >= h.working_set) return start_or_ask_room(h, h.fits_here);
  // Make room by lending running requests' blocks, unless the pool is a long request's (or nothing runs and
  // less than a working set is free: then it waits for blocks held for others to go).
  decision d;
  if (!h.idle && !h.rooms_running) d.loan_blocks = h.need - h.fits_here;
  return d;
}

uint32_t head_keeps(uint32_t head_need, uint32_t pool_total, bool room_granted, uint32_t room_keep,
                    uint32_t working_set) {
  if (head_need <= pool_total) return 0;
  return room_granted ? room_keep : working_set;
}

bool may_backfill(uint32_t need, uint32_t pool_total, uint32_t keep, uint32_t fits_here) {
  return need <= pool_total && uint64_t(need) + keep <= fits_here;
}

}  // namespace illm::actors::admission
