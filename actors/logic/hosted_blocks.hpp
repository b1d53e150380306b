#pragma once
// The blocks an instance keeps for other instances' requests, with their logical places: the
// rManager adds a move's blocks when it commits and removes them when the owner releases them; the
// attention server reads them to answer remote MicroAttention. So an attend message carries no block
// list, only the queries and a count, whatever the length of the context.
//
// A committed move becomes part of the owner's table a little later (the owner switches between its
// steps), so the holder can keep more blocks than the owner attends. Moves are kept in commit order,
// which is also the order the owner switches them in: the first moves whose blocks add up to the
// owner's count are exactly the ones it has switched. Thread-safe.

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "actors/logic/owner_keys.hpp"

namespace illm::actors {

/// Hosted blocks per (owner instance, request), in commit order.
class hosted_blocks {
 public:
  /// Blocks to attend: physical ids and the position of each block's first token, in logical order.
  struct blocks {
    std::vector<uint32_t> physical;
    std::vector<int32_t> first_token;
  };

  /// Records a committed move: blocks of (owner, req) at the given logical places.
  void add(uint32_t owner, uint64_t req, const std::vector<uint32_t>& logical, const std::vector<uint32_t>& physical);
  /// Forgets and returns every physical block of (owner, req).
  std::vector<uint32_t> remove_request(uint32_t owner, uint64_t req);
  /// Forgets one committed move's blocks (given back).
  void remove_blocks(uint32_t owner, uint64_t req, const std::vector<uint32_t>& physical);
  /// The first committed moves of (owner, req) holding `count` blocks in all; none when no prefix of
  /// the moves adds up to it (the owner and the holder disagree).
  std::optional<blocks> find(uint32_t owner, uint64_t req, uint32_t count) const;
  /// The blocks of (owner, req) at the logical places of `runs`, (first, count) pairs: each from the latest
  /// committed move that holds it; none when one of them is not here.
  std::optional<blocks> find_logical(uint32_t owner, uint64_t req, const std::vector<uint32_t>& runs) const;
  /// Every block of (owner, req): logical place -> physical block (a later move's over an earlier one's).
  std::map<uint32_t, uint32_t> logical_map(uint32_t owner, uint64_t req) const;
  /// Hosted blocks in all.
  uint32_t count() const;
  /// The requests of `owner` with blocks here.
  std::vector<uint64_t> requests_of(uint32_t owner) const;

 private:
  struct move_blocks {
    std::vector<uint32_t> logical, physical;
  };
  mutable std::mutex mutex_;
  std::map<owner_key, std::vector<move_blocks>> by_request_;  // in commit order
};

}  // namespace illm::actors
