#include "actors/faults/control_faults.hpp"

#include <csignal>

namespace illm::actors::faults {

control_faults::control_faults(const fault_plan& plan)
    : spec_(plan.control),
      delay_(plan.data.delay),
      crash_(plan.crash),
      crash_at_(plan.crash_at),
      random_(plan.data.seed ^ 0x636f6e74726f6cULL) {}  // a stream of its own, apart from the data plane's

bool control_faults::crash_now(crash_point point) {
  if (point != crash_) return false;
  std::lock_guard lock(mutex_);
  if (++crash_reached_ != crash_at_) return false;
  ++injected_[std::string("crash_") + to_string(point)];
  return true;
}

fate control_faults::draw(control_point point) {
  const int p = int(point);
  std::lock_guard lock(mutex_);
  const double x = std::uniform_real_distribution<double>(0.0, 1.0)(random_);
  fate f = fate::pass;
  const char* kind = "";
  if (drawn_[p]++ < spec_.drop_first[p]) f = fate::drop, kind = "_drop";
  else if (x < spec_.drop[p]) f = fate::drop, kind = "_drop";
  else if (x < spec_.drop[p] + spec_.duplicate[p]) f = fate::duplicate, kind = "_duplicate";
  else if (x < spec_.drop[p] + spec_.duplicate[p] + spec_.delay_chance[p]) f = fate::delay, kind = "_delay";
  if (f != fate::pass) ++injected_[std::string(to_string(point)) + kind];
  return f;
}

void crash_as_told(const std::function<void()>& hook) {
  if (!hook) std::raise(SIGKILL);
  hook();
}

fault_counts control_faults::injected() const {
  std::lock_guard lock(mutex_);
  return injected_;
}

}  // namespace illm::actors::faults
