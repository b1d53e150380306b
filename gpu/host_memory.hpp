#pragma once
// Host allocations for large, streamed arrays (weights, KV arenas): 64-byte aligned, and on 2 MiB
// huge pages when large, which keeps the TLB out of the way of streaming reads.

#include <cstddef>
#include <memory>

namespace illm::gpu {

/// Allocates `bytes` (nullptr when there is not enough memory); free with host_free.
void* host_alloc(size_t bytes);
void host_free(void* p);

/// Frees with host_free.
struct host_deleter {
  void operator()(void* p) const { host_free(p); }
};

/// An owned host array of T.
template <class T>
using host_array = std::unique_ptr<T[], host_deleter>;

}  // namespace illm::gpu
