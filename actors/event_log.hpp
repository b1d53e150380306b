#pragma once
// What the cluster did, kept for reports and tests: the latest moves (ordered by the gManager or asked for
// by an rManager) with their outcomes, and how many ended well or not in all. Thread-safe; shared by the
// actors of an embedded cluster. Bounded: a service that runs for months keeps the last `keep` moves.

#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "actors/messages.hpp"

namespace illm::actors {

/// A thread-safe record of move outcomes.
class event_log {
 public:
  /// Keeps the last `keep` moves (their totals count every move).
  explicit event_log(size_t keep = 4096) : keep_(keep) {}

  void record(const move_report& report) {
    std::lock_guard lock(mutex_);
    ++(report.ok ? ok_ : failed_);
    moves_.push_back(report);
    if (moves_.size() > keep_) moves_.pop_front();
  }
  /// The moves kept (the last `keep`), in the order they ended.
  std::vector<move_report> moves() const {
    std::lock_guard lock(mutex_);
    return {moves_.begin(), moves_.end()};
  }
  /// Moves that ended well, and that failed, since the start.
  uint64_t moves_ok() const {
    std::lock_guard lock(mutex_);
    return ok_;
  }
  uint64_t moves_failed() const {
    std::lock_guard lock(mutex_);
    return failed_;
  }

 private:
  const size_t keep_;
  mutable std::mutex mutex_;
  std::deque<move_report> moves_;
  uint64_t ok_ = 0, failed_ = 0;
};

}  // namespace illm::actors
