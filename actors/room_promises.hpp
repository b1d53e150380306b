#pragma once
// The blocks an instance has promised to other instances' rooms and not yet handed over. A room is a
// promise, not a reservation: the promised blocks stay in the pool until the owner's moves take them,
// a few at a time as its long request grows. Until then the instance may lend that space to its own
// requests that fit here whole (they end; a long prefill takes minutes to fill its room), so a room
// does not leave memory empty for the length of its request's prefill.
//
// The rManager promises and hands over; the instance reads the total when it admits requests. When a
// room's move finds its promised blocks in use, the promise is overdrawn: the instance then admits
// nothing into promised space until what is free covers every promise again, so the room's owner
// waits only for requests that already run here, which need nothing from anyone. Thread-safe.

#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

namespace illm::actors {

/// Blocks promised to rooms, per (owner instance, request).
class room_promises {
 public:
  /// Promises `n` more blocks to (owner, req)'s room.
  void promise(uint32_t owner, uint64_t req, uint32_t n);
  /// Takes up to `n` of (owner, req)'s promised blocks (they are being handed over); returns how many.
  uint32_t take(uint32_t owner, uint64_t req, uint32_t n);
  /// Forgets (owner, req)'s promise (its request ended); returns how many blocks it still had.
  uint32_t forget(uint32_t owner, uint64_t req);
  /// Blocks still promised to (owner, req).
  uint32_t of(uint32_t owner, uint64_t req) const;
  /// Blocks still promised, to every room.
  uint32_t total() const;

  /// Marks the promises overdrawn (a room's move found its blocks in use) or covered again.
  void set_overdrawn(bool overdrawn);
  /// Whether a room waits for promised blocks that this instance's own requests took.
  bool overdrawn() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> promised_;
  uint32_t total_ = 0;
  bool overdrawn_ = false;
};

}  // namespace illm::actors
