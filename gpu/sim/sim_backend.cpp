#include "gpu/sim/sim_backend.hpp"

#include <sys/mman.h>

#include <string>

namespace illm::gpu::sim {

void* sim_backend::allocate(size_t bytes) {
  // PROT_NONE and MAP_NORESERVE: address space only, however large, and a fault on any access.
  void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  std::lock_guard lock(mutex_);
  reservations_[p] = bytes;
  return p;
}

void sim_backend::deallocate(void* p) {
  std::lock_guard lock(mutex_);
  auto it = reservations_.find(p);
  if (it == reservations_.end()) return;
  munmap(p, it->second);
  reservations_.erase(it);
}

status sim_backend::none(const char* op) {
  return {status_code::unsupported, std::string("the sim backend does no math (") + op + ")"};
}

}  // namespace illm::gpu::sim
