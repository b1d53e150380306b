#pragma once
// What an instance's pool is promised to beyond the blocks in use: the blocks its running requests will
// still take as they grow, and the blocks promised to other instances' rooms and not yet handed over.
// Free blocks are either spare (promised to nobody: others may borrow them) or promised. The blocks the
// request first in the instance's queue needs are not spare either: lent away, they would leave the
// instance's GPU idle with its pool full of others' KV until those requests end.
//
// A room is a promise, not a reservation: the promised blocks stay in the pool until the owner's moves
// take them, a few at a time as its long request grows. Until then the instance may lend that space to
// its own requests that fit here whole (they end; a long prefill takes minutes to fill its room), so a
// room does not leave memory empty for the length of its request's prefill.
//
// The instance sets what its running requests will take (before it frees blocks that become theirs) and
// reads the rooms' total when it admits requests; the rManager promises and hands over room blocks and
// lends only spare ones. When a room's move finds its promised blocks in use, the promises are overdrawn:
// the instance then admits nothing into promised space until what is free covers every promise again,
// so the room's owner waits only for requests that already run here, which need nothing from anyone.
// Shared by the two actors: thread-safe.

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "actors/logic/owner_keys.hpp"

namespace illm::actors {

/// Blocks promised to the running requests, and to rooms per (owner instance, request).
class pool_promises {
 public:
  /// Sets the blocks the running requests will still take.
  void set_running(uint32_t blocks) { running_ = blocks; }
  /// The blocks the running requests will still take (as last set).
  uint32_t running() const { return running_; }

  /// Sets the blocks the request first in the instance's queue keeps here once the room granted to it starts
  /// it (0: none has a granted room). No new promise or loan takes them; rooms promised before may.
  void set_kept(uint32_t blocks) { kept_ = blocks; }
  /// The blocks a queued request with a granted room keeps here (as last set).
  uint32_t kept() const { return kept_; }

  /// Sets the blocks the request first in the instance's queue needs (0: none waits, or it needs a room).
  void set_queued(uint32_t blocks) { queued_ = blocks; }
  /// The blocks the first queued request needs (as last set).
  uint32_t queued() const { return queued_; }

  /// Promises `n` more blocks to (owner, req)'s room.
  void promise(uint32_t owner, uint64_t req, uint32_t n);
  /// Takes up to `n` of (owner, req)'s promised blocks (they are being handed over); returns how many. The
  /// promise stays known, at zero, until it is forgotten.
  uint32_t take(uint32_t owner, uint64_t req, uint32_t n);
  /// Gives back `n` blocks taken from (owner, req)'s promise (their move failed), unless it was forgotten.
  void restore(uint32_t owner, uint64_t req, uint32_t n);
  /// Forgets (owner, req)'s promise (its request ended); returns how many blocks it still had.
  uint32_t forget(uint32_t owner, uint64_t req);
  /// Blocks still promised to (owner, req).
  uint32_t of(uint32_t owner, uint64_t req) const;
  /// Blocks still promised, to every room.
  uint32_t rooms_total() const;
  /// The requests of `owner` with a promise here (forgotten ones not).
  std::vector<uint64_t> requests_of(uint32_t owner) const;

  /// Marks the promises overdrawn (a room's move found its blocks in use) or covered again.
  void set_overdrawn(bool overdrawn) { overdrawn_ = overdrawn; }
  /// Whether a room waits for promised blocks that this instance's own requests took.
  bool overdrawn() const { return overdrawn_; }

 private:
  std::atomic<uint32_t> running_{0}, queued_{0}, kept_{0};
  std::atomic<bool> overdrawn_{false};
  mutable std::mutex mutex_;  // the rooms' promises
  std::map<owner_key, uint32_t> promised_;
  uint32_t total_ = 0;
};

}  // namespace illm::actors
