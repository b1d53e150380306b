#include "gpu/host_memory.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

namespace illm::gpu {

namespace {
constexpr size_t huge_page_bytes = size_t(2) << 20;
}

void* host_alloc(size_t bytes) {
  const size_t alignment = bytes >= huge_page_bytes ? huge_page_bytes : 64;
  void* p = nullptr;
  if (posix_memalign(&p, alignment, std::max<size_t>(bytes, 64)) != 0) return nullptr;
  if (alignment == huge_page_bytes) madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

void host_free(void* p) { std::free(p); }

}  // namespace illm::gpu
