// A floor under the stack size of every thread created with an explicit one. civetweb sizes its worker
// threads at build time (Debian's: about 100 KiB), and its own request parsing uses nearly all of it;
// with CAF's io module and UCX loaded into the same process that was no longer enough (a worker
// overflowed in vsnprintf on the first request). The illm executable defines pthread_attr_setstacksize,
// so the libraries it loads call this one, which passes max(asked, floor) to the C library's.

#include <dlfcn.h>
#include <pthread.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>

namespace {

constexpr size_t thread_stack_floor = size_t(1) << 20;  // 1 MiB; the C library's default is 8 MiB

using setstacksize_fn = int (*)(pthread_attr_t*, size_t);

setstacksize_fn c_library_setstacksize() {
  static const auto fn = reinterpret_cast<setstacksize_fn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  return fn;
}

}  // namespace

extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  const setstacksize_fn real = c_library_setstacksize();
  return real ? real(attr, std::max(size, thread_stack_floor)) : EINVAL;
}
