#pragma once
// What the transport tests check of a peer that cannot be reached.

#include <vector>
#include "transport/transport.hpp"

namespace illm::transport::test {

/// Puts `bytes` of `source` into `region` of `peer`, flushes and sends it a message from `plane`; returns how many
/// of the three failed (all three, for a peer cut off).
inline int failed_operations(data_plane& plane, peer_id peer, const remote_region& region, const void* source,
                             uint64_t bytes) {
  int failed = 0;
  auto count = [&failed](status s) { failed += !s.is_ok(); };
  plane.put(peer, source, bytes, region, region.address, count);
  plane.flush(peer, count);
  plane.send(peer, channel::attend, std::vector<uint8_t>{1}, count);
  return failed;
}

}  // namespace illm::transport::test
