#pragma once
// What a faulty data plane does to the operations through it: a seed and, per kind of operation, the
// chance that it fails, is dropped, duplicated or delayed; and the peers it is cut off from. Written as
// "KEY=VALUE,KEY=VALUE", e.g. "seed=7,put.fail=0.01,send.drop=0.02,send.dup=0.01,send.delay=0.05,
// delay_ms=20,partition=2+3". docs/faults.md lists the keys.

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "transport/status.hpp"
#include "transport/transport.hpp"

namespace illm::transport {

/// The chances (0 to 1) of each fault, drawn per operation from the seed, in the order operations come.
struct fault_spec {
  uint64_t seed = 1;
  double put_fail = 0;        ///< a put completes with an error and writes nothing
  double put_drop = 0;        ///< a put writes nothing but completes as if it had (a checksum must catch it)
  double put_delay = 0;       ///< a put is issued `delay` later
  double send_fail = 0;       ///< a message is not sent and its completion says so
  double send_drop = 0;       ///< a message is lost: its completion says it was sent
  double send_duplicate = 0;  ///< a message arrives twice
  double send_delay = 0;      ///< a message is sent `delay` later (so later ones may overtake it)
  std::chrono::milliseconds delay{10};
  std::vector<peer_id> partitioned;  ///< peers cut off both ways: operations to them fail, theirs are dropped
};

/// Reads a spec; the error names the key or value that is wrong and what is allowed.
result<fault_spec> parse_fault_spec(std::string_view text);

/// The spec in the form parse_fault_spec reads, with every fault it injects (for the log at start).
std::string describe(const fault_spec& spec);

}  // namespace illm::transport
