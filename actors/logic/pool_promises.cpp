#include "actors/logic/pool_promises.hpp"

#include <algorithm>

namespace illm::actors {

void pool_promises::promise(uint32_t owner, uint64_t req, uint32_t n) {
  std::lock_guard lock(mutex_);
  promised_[{owner, req}] += n;
  total_ += n;
}

uint32_t pool_promises::take(uint32_t owner, uint64_t req, uint32_t n) {
  std::lock_guard lock(mutex_);
  auto it = promised_.find({owner, req});
  if (it == promised_.end()) return 0;
  const uint32_t taken = std::min(n, it->second);
  it->second -= taken;
  total_ -= taken;
  return taken;
}

void pool_promises::restore(uint32_t owner, uint64_t req, uint32_t n) {
  std::lock_guard lock(mutex_);
  auto it = promised_.find({owner, req});
  if (it == promised_.end() || n == 0) return;
  it->second += n;
  total_ += n;
}

uint32_t pool_promises::forget(uint32_t owner, uint64_t req) {
  std::lock_guard lock(mutex_);
  auto it = promised_.find({owner, req});
  if (it == promised_.end()) return 0;
  const uint32_t left = it->second;
  total_ -= left;
  promised_.erase(it);
  return left;
}

uint32_t pool_promises::of(uint32_t owner, uint64_t req) const {
  std::lock_guard lock(mutex_);
  auto it = promised_.find({owner, req});
  return it == promised_.end() ? 0 : it->second;
}

uint32_t pool_promises::rooms_total() const {
  std::lock_guard lock(mutex_);
  return total_;
}

std::vector<uint64_t> pool_promises::requests_of(uint32_t owner) const {
  std::lock_guard lock(mutex_);
  return requests_of_owner(promised_, owner);
}

}  // namespace illm::actors
