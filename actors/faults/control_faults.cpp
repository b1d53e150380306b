#include "actors/faults/control_faults.hpp"

namespace illm::actors::faults {

control_faults::control_faults(control_fault_spec spec, uint64_t seed, std::chrono::milliseconds delay)
    : spec_(spec), delay_(delay), random_(seed ^ 0x636f6e74726f6cULL) {}  // a stream of its own, apart from the data plane's

fate control_faults::draw(control_point point) {
  const int p = int(point);
  std::lock_guard lock(mutex_);
  const double x = std::uniform_real_distribution<double>(0.0, 1.0)(random_);
  fate f = fate::pass;
  const char* kind = "";
  if (x < spec_.drop[p]) f = fate::drop, kind = "_drop";
  else if (x < spec_.drop[p] + spec_.duplicate[p]) f = fate::duplicate, kind = "_duplicate";
  else if (x < spec_.drop[p] + spec_.duplicate[p] + spec_.delay_chance[p]) f = fate::delay, kind = "_delay";
  if (f != fate::pass) ++injected_[std::string(to_string(point)) + kind];
  return f;
}

fault_counts control_faults::injected() const {
  std::lock_guard lock(mutex_);
  return injected_;
}

}  // namespace illm::actors::faults
