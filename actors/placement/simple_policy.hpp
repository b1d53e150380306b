#pragma once
// The simple placement policy of the actor runtime: every full instance moves full blocks of its
// longest request to the emptiest instance. (The performance-model policy replaces it.)

#include "actors/placement/types.hpp"

namespace illm::actors::placement {

/// For each instance with no free block (not draining): its longest request gives up to half of the
/// emptiest other instance's free blocks, keeping its last (partial) block; the emptiest is then
/// charged with them before the next full instance is served.
std::vector<move_order> simple_policy(const std::vector<instance_snapshot>& cluster);

}  // namespace illm::actors::placement
