#pragma once
// What the cluster did, kept for reports and tests: every move (ordered by the gManager or asked for
// by an rManager) with its outcome. Thread-safe; shared by the actors of an embedded cluster.

#include <mutex>
#include <vector>

#include "actors/messages.hpp"

namespace illm::actors {

/// A thread-safe record of move outcomes.
class event_log {
 public:
  void record(const move_report& report) {
    std::lock_guard lock(mutex_);
    moves_.push_back(report);
  }
  /// Every move so far, in the order they ended.
  std::vector<move_report> moves() const {
    std::lock_guard lock(mutex_);
    return moves_;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<move_report> moves_;
};

}  // namespace illm::actors
