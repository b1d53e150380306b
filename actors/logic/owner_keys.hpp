#pragma once
// Per-request bookkeeping that a holder keeps for other instances is keyed by (owner instance, request).

#include <cstdint>
#include <utility>
#include <vector>

namespace illm::actors {

/// A request as a holder knows it: its owner instance and its id there.
using owner_key = std::pair<uint32_t, uint64_t>;

/// The requests of `owner` among the keys of a map ordered by owner_key, in order.
template <class Map>
std::vector<uint64_t> requests_of_owner(const Map& by_key, uint32_t owner) {
  std::vector<uint64_t> out;
  for (auto it = by_key.lower_bound(owner_key{owner, 0}); it != by_key.end() && it->first.first == owner; ++it)
    out.push_back(it->first.second);
  return out;
}

}  // namespace illm::actors
