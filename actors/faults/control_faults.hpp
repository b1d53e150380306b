#pragma once
// The control plane's fault injector: the actors ask it, at each point of a fault plan, what happens to one
// message or answer (it passes, is lost, arrives twice, or arrives later), drawn from the plan's seed in the
// order they ask, and at each crash point whether to die there; it counts every fault it injects. Shared by
// the actors of a process (thread-safe).

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>

#include "actors/faults/fault_plan.hpp"

namespace illm::actors::faults {

/// What happens to one message or answer.
enum class fate { pass, drop, duplicate, delay };

/// Faults injected so far, by kind ("heartbeat_drop", "reply_duplicate", ...).
using fault_counts = std::map<std::string, uint64_t>;

/// A planned crash (control_faults::crash_now): runs `hook`, how the process's actor dies (an embedded
/// cluster's), or kills the process as SIGKILL would when there is none. The caller's actor then quits.
void crash_as_told(const std::function<void()>& hook);

/// Draws control-plane faults.
class control_faults {
 public:
  explicit control_faults(const fault_plan& plan);
  /// What happens to the next message or answer at `point` (counted when it is a fault).
  fate draw(control_point point);
  /// Whether the caller dies at `point` now: true once, the plan's crash_at-th time the point is reached
  /// (counted as "crash_POINT"). The caller then crashes as the process's crash hook says.
  bool crash_now(crash_point point);
  /// How long a delayed one waits.
  std::chrono::milliseconds delay() const { return delay_; }
  /// The faults injected so far, by kind.
  fault_counts injected() const;

 private:
  const control_fault_spec spec_;
  const std::chrono::milliseconds delay_;
  const crash_point crash_;
  const uint32_t crash_at_;
  uint32_t crash_reached_ = 0;
  uint64_t drawn_[control_point_count] = {};  ///< messages drawn for, per point
  mutable std::mutex mutex_;
  std::mt19937_64 random_;
  fault_counts injected_;
};

}  // namespace illm::actors::faults
