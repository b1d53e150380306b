#include "actors/room_promises.hpp"

#include <algorithm>

namespace illm::actors {

void room_promises::promise(uint32_t owner, uint64_t req, uint32_t n) {
  std::lock_guard lock(mutex_);
  promised_[{owner, req}] += n;
  total_ += n;
}

uint32_t room_promises::take(uint32_t owner, uint64_t req, uint32_t n) {
  std::lock_guard lock(mutex_);
  auto it = promised_.find({owner, req});
  if (it == promised_.end()) return 0;
  const uint32_t taken = std::min(n, it->second);
  it->second -= taken;
  total_ -= taken;
  if (it->second == 0) promised_.erase(it);
  return taken;
}

uint32_t room_promises::forget(uint32_t owner, uint64_t req) {
  std::lock_guard lock(mutex_);
  auto it = promised_.find({owner, req});
  if (it == promised_.end()) return 0;
  const uint32_t left = it->second;
  total_ -= left;
  promised_.erase(it);
  return left;
}

uint32_t room_promises::of(uint32_t owner, uint64_t req) const {
  std::lock_guard lock(mutex_);
  auto it = promised_.find({owner, req});
  return it == promised_.end() ? 0 : it->second;
}

uint32_t room_promises::total() const {
  std::lock_guard lock(mutex_);
  return total_;
}

void room_promises::set_overdrawn(bool overdrawn) {
  std::lock_guard lock(mutex_);
  overdrawn_ = overdrawn;
}

bool room_promises::overdrawn() const {
  std::lock_guard lock(mutex_);
  return overdrawn_;
}

}  // namespace illm::actors
