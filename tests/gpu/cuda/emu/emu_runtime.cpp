// The CPU emulation of CUDA (see emu_runtime.hpp): device memory as mappings that are inaccessible
// outside kernels and copies, thread blocks as fibers switched at barriers, streams as threads that run their
// work in order after seeded random delays, cuBLAS's GemmEx in double.
#include "emu_runtime.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace illm_emu {

namespace {

// ---- Device memory ---------------------------------------------------------------------------------

struct allocation {
  size_t bytes;    // asked for
  int device = 0;  // the device current on the allocating thread
};

std::map<uintptr_t, allocation>& device_allocations() {
  static std::map<uintptr_t, allocation> map;
  return map;
}
std::map<uintptr_t, size_t>& pinned_allocations() {
  static std::map<uintptr_t, size_t> map;
  return map;
}
int access_depth = 0;

/// Held by every call that reads or changes the emulation's state (allocations, the block runner, device
/// memory's protection): the runtime calls the emulated device from several threads (a worker, attention
/// servers, moves), and the emulation runs one call at a time, as one device would run them in some order.
std::recursive_mutex& api_mutex() {
  static std::recursive_mutex mutex;
  return mutex;
}
int device_count = 1;
thread_local int current_device = 0;  // as CUDA's: per host thread, set by cudaSetDevice
thread_local cudaError_t last_error = cudaSuccess;
std::map<const void*, int>& shared_limits() {
  static std::map<const void*, int> map;
  return map;
}

constexpr size_t huge_page = size_t(2) << 20;

/// Every device allocation lies in one reserved range of address space, handed out first fit in whole pages, its
/// pages asking for transparent huge pages: opening and closing device memory around each kernel and copy is then
/// one mprotect over the range in use, changing one entry per 2 MiB (per allocation and per 4 KiB page, that was
/// the emulation's main cost), with the same protection.
class device_arena {
 public:
  static constexpr size_t reserved = size_t(64) << 30;

  /// `bytes` of the arena, inaccessible unless `open`; null when it is full.
  void* take(size_t bytes, bool open) {
    if (!base_ && !reserve()) return nullptr;
    const size_t size = rounded(bytes);
    auto fit = std::find_if(free_.begin(), free_.end(), [&](const auto& f) { return f.second >= size; });
    if (fit == free_.end()) return nullptr;
    const size_t at = fit->first, left = fit->second - size;
    free_.erase(fit);
    if (left) free_[at + size] = left;
    in_use_end_ = std::max(in_use_end_, whole_huge_pages(at + size));
    char* p = base_ + at;
    // The whole range in use opened and closed, never a part of it: an mprotect over part of a huge page splits
    // it into 4 KiB entries (and a page first touched in a smaller mapping is never huge), which every later
    // open and close would walk.
    protect(PROT_READ | PROT_WRITE);
    std::memset(p, 0xff, bytes);  // NaN until written, as garbage would be
    if (!open) protect(PROT_NONE);
    return p;
  }

  /// Gives `bytes` at `p` back (the huge pages wholly inside dropped: their memory is returned; dropping part
  /// of one would split it).
  void give(void* p, size_t bytes) {
    const size_t at = size_t(static_cast<char*>(p) - base_), size = rounded(bytes);
    const size_t first = whole_huge_pages(at), last = (at + size) / huge_page * huge_page;
    if (last > first) madvise(base_ + first, last - first, MADV_DONTNEED);
    auto next = free_.lower_bound(at);
    size_t start = at, length = size;
    if (next != free_.end() && next->first == at + size) {
      length += next->second;
      next = free_.erase(next);
    }
    if (next != free_.begin()) {
      auto before = std::prev(next);
      if (before->first + before->second == at) {
        start = before->first;
        length += before->second;
        free_.erase(before);
      }
    }
    free_[start] = length;
  }

  /// Opens (PROT_READ | PROT_WRITE) or closes (PROT_NONE) every allocation.
  void protect(int prot) const {
    if (in_use_end_) set(base_, in_use_end_, prot);
  }

 private:
  static size_t whole_huge_pages(size_t bytes) { return (bytes + huge_page - 1) / huge_page * huge_page; }
  static size_t rounded(size_t bytes) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
  }
  static void set(void* p, size_t bytes, int prot) {
    if (mprotect(p, bytes, prot) != 0) fail("mprotect failed");
  }
  bool reserve() {
    void* raw = mmap(nullptr, reserved + huge_page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw == MAP_FAILED) return false;
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw), aligned = (start + huge_page - 1) / huge_page * huge_page;
    base_ = reinterpret_cast<char*>(aligned);
    madvise(base_, reserved, MADV_HUGEPAGE);  // a hint: without THP, plain pages
    free_[0] = reserved;
    return true;
  }

  char* base_ = nullptr;
  std::map<size_t, size_t> free_;  // offset -> bytes
  size_t in_use_end_ = 0;          // past the highest byte ever handed out
};

device_arena& arena() {
  static device_arena a;
  return a;
}

void protect_all(int prot) { arena().protect(prot); }

/// Device memory is readable and writable while one of these lives.
struct access_scope {
  access_scope() {
    if (access_depth++ == 0) protect_all(PROT_READ | PROT_WRITE);
  }
  ~access_scope() {
    if (--access_depth == 0) protect_all(PROT_NONE);
  }
  access_scope(const access_scope&) = delete;
  access_scope& operator=(const access_scope&) = delete;
};

template <class Map>
bool within(const Map& map, const void* p, size_t bytes, size_t (*size_of)(const typename Map::mapped_type&)) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  auto it = map.upper_bound(at);
  if (it == map.begin()) return false;
  --it;
  return at >= it->first && at + bytes <= it->first + size_of(it->second);
}

size_t allocation_bytes(const allocation& a) { return a.bytes; }
size_t pinned_bytes(const size_t& n) { return n; }

bool is_pinned(const void* p, size_t bytes) { return within(pinned_allocations(), p, bytes, pinned_bytes); }

cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess) last_error = e;
  return e;
}

// ---- Streams ---------------------------------------------------------------------------------------

/// A stream: a thread that runs the stream's work in order, each piece after a random delay, under the
/// emulation's lock (one piece of work at a time in the whole emulation, as one device would run them).
struct emu_stream {
  int device = 0;
  std::mt19937_64 random;
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<std::function<void()>> queue;  // under mutex
  bool busy = false;                        // a piece taken from the queue has not finished (under mutex)
  bool stopping = false;
  std::thread thread;
};

struct stream_registry {
  std::mutex mutex;
  std::set<emu_stream*> streams;
  uint64_t seed = 1;
  unsigned max_delay_us = 200;
  uint64_t made = 0;
  stream_registry() {
    if (const char* s = std::getenv("ILLM_EMU_SEED")) seed = std::strtoull(s, nullptr, 10);
    if (const char* d = std::getenv("ILLM_EMU_MAX_DELAY_US")) max_delay_us = unsigned(std::strtoul(d, nullptr, 10));
  }
};

stream_registry& registry() {
  static stream_registry r;
  return r;
}

emu_stream* as_stream(cudaStream_t s) { return reinterpret_cast<emu_stream*>(s); }

void run_stream(emu_stream* s, unsigned max_delay_us) {
  current_device = s->device;
  std::unique_lock lock(s->mutex);
  for (;;) {
    s->changed.wait(lock, [&] { return s->stopping || !s->queue.empty(); });
    if (s->queue.empty()) return;  // stopping, and every piece of work ran
    std::function<void()> work = std::move(s->queue.front());
    s->queue.pop_front();
    s->busy = true;
    const uint64_t delay_us = max_delay_us ? s->random() % (uint64_t(max_delay_us) + 1) : 0;
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    {
      const std::lock_guard api(api_mutex());
      work();
    }
    lock.lock();
    s->busy = false;
    s->changed.notify_all();
  }
}

/// Runs `work` on `stream` after the work queued there before; on the default stream (null), now. The caller
/// must not hold the emulation's lock while it waits for a stream (drain), as the stream's thread takes it.
void enqueue(cudaStream_t stream, std::function<void()> work) {
  if (!stream) {
    const std::lock_guard api(api_mutex());
    work();
    return;
  }
  emu_stream* s = as_stream(stream);
  const std::lock_guard lock(s->mutex);
  s->queue.push_back(std::move(work));
  s->changed.notify_all();
}

/// Waits until every piece of work queued on `s` has run.
void drain(emu_stream* s) {
  std::unique_lock lock(s->mutex);
  s->changed.wait(lock, [&] { return s->queue.empty() && !s->busy; });
}

/// Waits for every stream of `device` (-1: of every device).
void drain_device(int device) {
  std::vector<emu_stream*> streams;
  {
    const std::lock_guard lock(registry().mutex);
    for (emu_stream* s : registry().streams)
      if (device < 0 || s->device == device) streams.push_back(s);
  }
  for (emu_stream* s : streams) drain(s);
}

/// An event: the times it was recorded and those whose record has run, and when the last ran.
struct emu_event {
  std::mutex mutex;
  std::condition_variable changed;
  uint64_t recorded = 0, completed = 0;
  std::chrono::steady_clock::time_point at{};
};

emu_event* as_event(cudaEvent_t e) { return reinterpret_cast<emu_event*>(e); }

// ---- Fibers ----------------------------------------------------------------------------------------

constexpr size_t stack_bytes = size_t(256) << 10;
constexpr int max_threads = 1024;

struct pending_copy {
  void* dst;
  const void* src;
  size_t bytes;
};

enum class fiber_state { runnable, block_wait, warp_wait, done };

struct fiber {
  void* sp = nullptr;
  std::unique_ptr<char[]> stack;
#if !defined(__x86_64__)
  ucontext_t context;
#endif
  fiber_state state = fiber_state::done;
  thread_indices indices;
  unsigned exchanges = 0;
  std::vector<pending_copy> open_group;
  std::deque<std::vector<pending_copy>> groups;
};

struct block_runner {
  std::vector<fiber> fibers = std::vector<fiber>(max_threads);
  std::vector<uint64_t> slots;  // [warp][2][32]
  std::vector<unsigned char> shared;
  size_t shared_bytes = 0;
  fiber* current = nullptr;
  const std::function<void()>* body = nullptr;
  int n_threads = 0;
#if defined(__x86_64__)
  void* scheduler_sp = nullptr;
#else
  ucontext_t scheduler;
#endif
};

block_runner& runner() {
  static block_runner r;
  return r;
}

}  // namespace
}  // namespace illm_emu

#if defined(__x86_64__)
// Saves the callee-saved registers, MXCSR and the x87 control word on the current stack, stores the
// stack pointer in *save, switches to `load` and restores the same from there.
extern "C" void illm_emu_switch(void** save, void* load);
asm(R"(
  .text
  .globl illm_emu_switch
  .type illm_emu_switch, @function
illm_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size illm_emu_switch, .-illm_emu_switch
)");
#endif

namespace illm_emu {

namespace {

void yield_to_scheduler() {
  block_runner& r = runner();
#if defined(__x86_64__)
  illm_emu_switch(&r.current->sp, r.scheduler_sp);
#else
  swapcontext(&r.current->context, &r.scheduler);
#endif
}

[[noreturn]] void fiber_entry() {
  block_runner& r = runner();
  (*r.body)();
  r.current->state = fiber_state::done;
  yield_to_scheduler();
  std::abort();  // a finished fiber is never resumed
}

void start_fiber(fiber& f) {
  if (!f.stack) f.stack.reset(new char[stack_bytes]);
#if defined(__x86_64__)
  auto top = reinterpret_cast<uintptr_t>(f.stack.get() + stack_bytes) & ~uintptr_t(15);
  auto* p = reinterpret_cast<uint64_t*>(top);
  *--p = 0;                                          // the entry's return address slot (alignment)
  *--p = reinterpret_cast<uint64_t>(&fiber_entry);  // where the first switch returns to
  for (int i = 0; i < 6; ++i) *--p = 0;              // rbp, rbx, r12..r15
  *--p = (uint64_t(0x037f) << 32) | 0x1f80;          // x87 control word, MXCSR defaults
  f.sp = p;
#else
  getcontext(&f.context);
  f.context.uc_stack.ss_sp = f.stack.get();
  f.context.uc_stack.ss_size = stack_bytes;
  f.context.uc_link = nullptr;
  makecontext(&f.context, reinterpret_cast<void (*)()>(&fiber_entry), 0);
#endif
}

void resume(fiber& f) {
  block_runner& r = runner();
  r.current = &f;
#if defined(__x86_64__)
  illm_emu_switch(&r.scheduler_sp, f.sp);
#else
  swapcontext(&r.scheduler, &f.context);
#endif
  r.current = nullptr;
}

void wait_as(fiber_state s) {
  runner().current->state = s;
  yield_to_scheduler();
}

/// After every fiber stopped at a barrier (or finished): lets the warps whose lanes all wait at a warp
/// barrier go on, else the block when every live thread waits at __syncthreads.
void release_barriers(int n) {
  block_runner& r = runner();
  bool released = false;
  for (int w0 = 0; w0 < n; w0 += 32) {
    int warp_waits = 0, block_waits = 0, done = 0;
    for (int i = w0; i < w0 + 32; ++i) {
      const fiber_state s = r.fibers[size_t(i)].state;
      warp_waits += s == fiber_state::warp_wait;
      block_waits += s == fiber_state::block_wait;
      done += s == fiber_state::done;
    }
    if (warp_waits == 0) continue;
    if (done > 0) fail("a shuffle or __syncwarp in a warp some of whose lanes have exited");
    if (block_waits > 0) fail("divergent barriers: lanes of one warp wait at __syncthreads and at a warp barrier");
    for (int i = w0; i < w0 + 32; ++i) r.fibers[size_t(i)].state = fiber_state::runnable;
    released = true;
  }
  if (released) return;
  bool any = false;
  for (int i = 0; i < n; ++i)
    if (r.fibers[size_t(i)].state == fiber_state::block_wait) {
      r.fibers[size_t(i)].state = fiber_state::runnable;
      any = true;
    }
  if (!any) fail("deadlock: no thread can go on");
}

void run_block(dim3 block_idx, dim3 grid, dim3 block) {
  block_runner& r = runner();
  const int n = int(block.x);
  std::fill(r.shared.begin(), r.shared.end(), 0xff);  // NaN until written, as garbage would be
  for (int i = 0; i < n; ++i) {
    fiber& f = r.fibers[size_t(i)];
    f.state = fiber_state::runnable;
    f.indices = {dim3(unsigned(i)), block_idx, block, grid};
    f.exchanges = 0;
    f.open_group.clear();
    f.groups.clear();
    start_fiber(f);
  }
  int alive = n;
  while (alive > 0) {
    for (int i = 0; i < n; ++i) {
      fiber& f = r.fibers[size_t(i)];
      if (f.state != fiber_state::runnable) continue;
      resume(f);
      if (f.state == fiber_state::done) --alive;
    }
    if (alive > 0) release_barriers(n);
  }
}

}  // namespace

// ---- The device language ----------------------------------------------------------------------------

thread_indices& current_indices() {
  block_runner& r = runner();
  if (!r.current) fail("a device index read outside a kernel");
  return r.current->indices;
}

void fail(const char* what) {
  block_runner& r = runner();
  if (r.current)
    std::fprintf(stderr, "cuda emulation: %s (block %u,%u,%u thread %u)\n", what, r.current->indices.block_idx.x,
                 r.current->indices.block_idx.y, r.current->indices.block_idx.z, r.current->indices.thread_idx.x);
  else
    std::fprintf(stderr, "cuda emulation: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

void sync_block() { wait_as(fiber_state::block_wait); }

void sync_warp() { wait_as(fiber_state::warp_wait); }

int lane_id() { return int(current_indices().thread_idx.x % 32); }

uint64_t exchange(uint64_t bits, int source) {
  block_runner& r = runner();
  fiber& f = *r.current;
  const size_t warp = f.indices.thread_idx.x / 32, lane = f.indices.thread_idx.x % 32, k = f.exchanges++ & 1;
  r.slots[(warp * 2 + k) * 32 + lane] = bits;
  wait_as(fiber_state::warp_wait);
  return r.slots[(warp * 2 + k) * 32 + size_t(source)];
}

void pipeline_copy(void* dst, const void* src, size_t bytes) {
  block_runner& r = runner();
  const auto d = reinterpret_cast<uintptr_t>(dst), base = reinterpret_cast<uintptr_t>(r.shared.data());
  if (bytes != 4 && bytes != 8 && bytes != 16) fail("cp.async of a size other than 4, 8 or 16 bytes");
  if (d % bytes != 0 || reinterpret_cast<uintptr_t>(src) % bytes != 0) fail("misaligned cp.async");
  if (d < base || d + bytes > base + r.shared_bytes) fail("cp.async destination outside dynamic shared memory");
  if (!is_device(src, bytes)) fail("cp.async source outside device memory");
  r.current->open_group.push_back({dst, src, bytes});
}

void pipeline_commit() {
  fiber& f = *runner().current;
  f.groups.push_back(std::move(f.open_group));
  f.open_group.clear();
}

void pipeline_wait(size_t prior) {
  fiber& f = *runner().current;
  while (f.groups.size() > prior) {
    for (const pending_copy& c : f.groups.front()) std::memcpy(c.dst, c.src, c.bytes);
    f.groups.pop_front();
  }
}

unsigned char* dynamic_shared() {
  block_runner& r = runner();
  if (!r.current) fail("dynamic shared memory outside a kernel");
  return r.shared.data();
}

// ---- The runtime ------------------------------------------------------------------------------------

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorPeerAccessAlreadyEnabled: return "cudaErrorPeerAccessAlreadyEnabled";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    default: return cudaGetErrorName(e);
  }
}

cudaError_t cudaGetLastError() { return std::exchange(last_error, cudaSuccess); }
cudaError_t cudaPeekAtLastError() { return last_error; }

void set_device_count(int n) { device_count = n; }

void set_stream_delay(uint64_t seed, unsigned max_delay_us) {
  const std::lock_guard lock(registry().mutex);
  registry().seed = seed;
  registry().max_delay_us = max_delay_us;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count;
  return device_count > 0 ? cudaSuccess : set_error(cudaErrorInsufficientDriver);
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count) return set_error(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}

void check_stream(cudaStream_t stream, const char* what) {
  if (!stream) return;
  const int device = as_stream(stream)->device;
  if (device != current_device)
    fail(std::string(what) + ": a stream of device " + std::to_string(device) + " used while device " +
         std::to_string(current_device) + " is current on this thread");
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= device_count) return set_error(cudaErrorInvalidDevice);
  *prop = {};
  std::snprintf(prop->name, sizeof prop->name, "CUDA emulation on the CPU");
  prop->totalGlobalMem = size_t(8) << 30;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 4;
  prop->l2CacheSize = 1 << 20;
  prop->sharedMemPerMultiprocessor = 228 << 10;
  prop->sharedMemPerBlockOptin = 227 << 10;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  const std::lock_guard lock(api_mutex());
  size_t used = 0;
  for (const auto& [base, a] : device_allocations()) used += a.bytes;
  *total_bytes = size_t(8) << 30;
  *free_bytes = *total_bytes - std::min(used, *total_bytes);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  const std::lock_guard lock(api_mutex());
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  void* at = arena().take(bytes, access_depth > 0);
  if (!at) return set_error(cudaErrorMemoryAllocation);
  device_allocations()[reinterpret_cast<uintptr_t>(at)] = {bytes, current_device};
  *p = at;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  drain_device(-1);  // as CUDA's, it waits for the work queued before
  const std::lock_guard lock(api_mutex());
  auto it = device_allocations().find(reinterpret_cast<uintptr_t>(p));
  if (it == device_allocations().end()) return set_error(cudaErrorInvalidValue);
  arena().give(p, it->second.bytes);
  device_allocations().erase(it);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  const std::lock_guard lock(api_mutex());
  *p = std::malloc(std::max<size_t>(bytes, 1));
  if (!*p) return set_error(cudaErrorMemoryAllocation);
  pinned_allocations()[reinterpret_cast<uintptr_t>(*p)] = bytes;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  drain_device(-1);
  const std::lock_guard lock(api_mutex());
  if (pinned_allocations().erase(reinterpret_cast<uintptr_t>(p)) == 0) return set_error(cudaErrorInvalidValue);
  std::free(p);
  return cudaSuccess;
}

int device_of(const void* p) {
  const std::lock_guard lock(api_mutex());
  auto it = device_allocations().upper_bound(reinterpret_cast<uintptr_t>(p));
  return it == device_allocations().begin() ? -1 : std::prev(it)->second.device;
}

bool is_device(const void* p, size_t bytes) {
  const std::lock_guard lock(api_mutex());
  return within(device_allocations(), p, bytes == 0 ? 1 : bytes, allocation_bytes);
}

namespace {

/// Stops when the pointers do not fit the copy's kind or touch another device's memory.
void check_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, const char* what) {
  const std::lock_guard lock(api_mutex());
  const bool dst_device = is_device(dst, bytes), src_device = is_device(src, bytes);
  bool ok = false;
  switch (kind) {
    case cudaMemcpyHostToDevice: ok = dst_device && !is_device(src, 1); break;
    case cudaMemcpyDeviceToHost: ok = src_device && !is_device(dst, 1); break;
    case cudaMemcpyDeviceToDevice: ok = dst_device && src_device; break;
    case cudaMemcpyHostToHost: ok = !is_device(dst, 1) && !is_device(src, 1); break;
    case cudaMemcpyDefault: ok = (dst_device || !is_device(dst, 1)) && (src_device || !is_device(src, 1)); break;
  }
  if (!ok) fail(std::string(what) + ": pointers do not match the copy's kind or run past an allocation");
  for (const void* p : {static_cast<const void*>(dst), src})
    if (is_device(p, 1) && device_of(p) != current_device)
      fail(std::string(what) + ": memory of device " + std::to_string(device_of(p)) + " while device " +
           std::to_string(current_device) + " is current (no peer access)");
}

bool pageable(const void* p, size_t bytes) { return !is_device(p, 1) && !is_pinned(p, bytes); }

}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  check_copy(dst, src, bytes, kind, "cudaMemcpy");
  const std::lock_guard lock(api_mutex());
  access_scope scope;
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  check_stream(stream, "cudaMemcpyAsync");
  if (!stream) return cudaMemcpy(dst, src, bytes, kind);
  if (bytes == 0) return cudaSuccess;
  check_copy(dst, src, bytes, kind, "cudaMemcpyAsync");
  if (pageable(src, bytes)) {  // CUDA stages pageable memory before it returns: the caller may reuse it at once
    auto taken = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    enqueue(stream, [dst, taken] {
      access_scope scope;
      std::memcpy(dst, taken->data(), taken->size());
    });
  } else {
    enqueue(stream, [dst, src, bytes] {
      access_scope scope;
      std::memmove(dst, src, bytes);
    });
  }
  if (pageable(dst, bytes)) drain(as_stream(stream));  // into pageable memory CUDA returns once it is done
  return cudaSuccess;
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (device < 0 || device >= device_count || peer < 0 || peer >= device_count) return set_error(cudaErrorInvalidDevice);
  *can = device != peer;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned) {
  static std::set<std::pair<int, int>> enabled;
  const std::lock_guard lock(api_mutex());
  if (peer < 0 || peer >= device_count || peer == current_device) return set_error(cudaErrorInvalidDevice);
  if (!enabled.insert({current_device, peer}).second) return set_error(cudaErrorPeerAccessAlreadyEnabled);
  return cudaSuccess;
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t stream) {
  check_stream(stream, "cudaMemcpyPeerAsync");
  if (bytes == 0) return cudaSuccess;
  {
    const std::lock_guard lock(api_mutex());
    if (!is_device(dst, bytes) || !is_device(src, bytes) || device_of(dst) != dst_device ||
        device_of(src) != src_device)
      fail("cudaMemcpyPeerAsync: the pointers are not memory of the devices named, or run past an allocation");
  }
  enqueue(stream, [dst, src, bytes] {
    access_scope scope;
    std::memmove(dst, src, bytes);
  });
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  check_stream(stream, "cudaMemsetAsync");
  if (bytes == 0) return cudaSuccess;
  if (!is_device(p, bytes)) fail("cudaMemset outside device memory");
  enqueue(stream, [p, value, bytes] {
    access_scope scope;
    std::memset(p, value, bytes);
  });
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* p) {
  const std::lock_guard lock(api_mutex());
  *attributes = {};
  if (is_device(p, 1)) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->device = device_of(p);
    attributes->devicePointer = const_cast<void*>(p);
  } else if (is_pinned(p, 1)) {
    attributes->type = cudaMemoryTypeHost;
    attributes->hostPointer = const_cast<void*>(p);
  }
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  auto* s = new emu_stream;
  s->device = current_device;  // a stream belongs to the current device
  unsigned max_delay_us = 0;
  {
    stream_registry& r = registry();
    const std::lock_guard lock(r.mutex);
    s->random.seed(r.seed * 0x9e3779b97f4a7c15ULL + ++r.made);
    max_delay_us = r.max_delay_us;
    r.streams.insert(s);
  }
  s->thread = std::thread(run_stream, s, max_delay_us);
  *stream = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  emu_stream* s = as_stream(stream);
  if (!s) return set_error(cudaErrorInvalidValue);
  {
    const std::lock_guard lock(registry().mutex);
    registry().streams.erase(s);
  }
  {
    const std::lock_guard lock(s->mutex);
    s->stopping = true;  // the work queued still runs, as CUDA's does
    s->changed.notify_all();
  }
  s->thread.join();
  delete s;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream) drain(as_stream(stream));
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  drain_device(current_device);
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  *event = reinterpret_cast<cudaEvent_t>(new emu_event);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete as_event(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  check_stream(stream, "cudaEventRecord");
  emu_event* e = as_event(event);
  uint64_t nth = 0;
  {
    const std::lock_guard lock(e->mutex);
    nth = ++e->recorded;
  }
  auto reached = [e, nth] {  // the event completes when the stream reaches it
    const std::lock_guard lock(e->mutex);
    e->completed = std::max(e->completed, nth);
    e->at = std::chrono::steady_clock::now();
    e->changed.notify_all();
  };
  if (stream) enqueue(stream, reached);
  else reached();
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  emu_event* e = as_event(event);
  std::unique_lock lock(e->mutex);
  const uint64_t last = e->recorded;
  e->changed.wait(lock, [&] { return e->completed >= last; });
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  std::chrono::steady_clock::time_point from, to;
  {
    const std::lock_guard lock(as_event(start)->mutex);
    from = as_event(start)->at;
  }
  {
    const std::lock_guard lock(as_event(end)->mutex);
    to = as_event(end)->at;
  }
  *ms = std::chrono::duration<float, std::milli>(to - from).count();
  return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attribute, int value) {
  const std::lock_guard lock(api_mutex());
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > (227 << 10))
    return set_error(cudaErrorInvalidValue);
  shared_limits()[func] = value;
  return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void*, int, size_t) {
  *blocks = 2;
  return cudaSuccess;
}

namespace {

/// Runs `body` as every thread of every block of the grid, one block at a time (under the emulation's lock).
void run_grid(dim3 grid, dim3 block, size_t shared_bytes, const std::function<void()>& body) {
  block_runner& r = runner();
  r.shared.assign(shared_bytes + 16, 0xff);
  r.shared_bytes = shared_bytes;
  r.slots.assign(size_t(block.x / 32) * 2 * 32, 0);
  r.body = &body;
  r.n_threads = int(block.x);
  access_scope scope;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) run_block(dim3(x, y, z), grid, block);
}

}  // namespace

cudaError_t launch_grid(const void* func, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                        std::function<void()> body) {
  {
    const std::lock_guard lock(api_mutex());
    if (block.y != 1 || block.z != 1 || block.x == 0 || block.x > max_threads || block.x % 32 != 0)
      fail("the emulation takes one-dimensional blocks of a multiple of 32 threads, at most 1024");
    if (grid.y > 65535 || grid.z > 65535) return set_error(cudaErrorInvalidConfiguration);
    const auto limit = shared_limits().find(func);
    const size_t allowed = limit != shared_limits().end() ? size_t(limit->second) : size_t(48) << 10;
    if (shared_bytes > std::max<size_t>(allowed, size_t(48) << 10))
      fail("a launch asks for more dynamic shared memory than cudaFuncSetAttribute allowed");
    if (runner().current) fail("a launch from inside a kernel");
  }
  enqueue(stream, [grid, block, shared_bytes, body = std::move(body)] { run_grid(grid, block, shared_bytes, body); });
  return cudaSuccess;
}

// ---- cuBLAS -----------------------------------------------------------------------------------------

namespace {

double element(const void* base, cudaDataType_t type, size_t i) {
  switch (type) {
    case CUDA_R_32F: return static_cast<const float*>(base)[i];
    case CUDA_R_16F: return illm::gpu::f16_to_float(static_cast<const uint16_t*>(base)[i]);
    case CUDA_R_16BF: return illm::gpu::bf16_to_float(static_cast<const uint16_t*>(base)[i]);
  }
  return 0;
}

size_t type_bytes(cudaDataType_t type) { return type == CUDA_R_32F ? 4 : 2; }

/// Into `out`: `rows` rows of `k` elements of the column-major matrix at base (leading dimension ld) as floats
/// (every f32, f16 and bf16 value is one), row r contiguous: row r's element l is base[r + l * ld] when `strided`
/// (rows of the stored matrix), else base[l + r * ld] (its columns).
void widen_rows(const void* base, cudaDataType_t type, int ld, int rows, int k, bool strided,
                std::vector<float>& out) {
  out.resize(size_t(rows) * size_t(k));
  for (int r = 0; r < rows; ++r)
    for (int l = 0; l < k; ++l)
      out[size_t(r) * k + l] =
          float(element(base, type, strided ? size_t(r) + size_t(l) * ld : size_t(l) + size_t(r) * ld));
}

/// True when the column-major rows x cols matrix at p (leading dimension ld) is device memory.
bool device_matrix(const void* p, cudaDataType_t type, int rows, int cols, int ld) {
  if (rows == 0 || cols == 0) return true;
  return is_device(p, (size_t(ld) * (cols - 1) + rows) * type_bytes(type));
}

}  // namespace

/// A cuBLAS handle: the stream its work goes to.
struct emu_blas {
  cudaStream_t stream = nullptr;
};

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = reinterpret_cast<cublasHandle_t>(new emu_blas);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete reinterpret_cast<emu_blas*>(handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  reinterpret_cast<emu_blas*>(handle)->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType_t a_type, int lda, const void* B,
                            cudaDataType_t b_type, int ldb, const void* beta, void* C, cudaDataType_t c_type, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  const cudaStream_t stream = reinterpret_cast<emu_blas*>(handle)->stream;
  check_stream(stream, "cublasGemmEx");
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, transa == CUBLAS_OP_N ? m : k) ||
      ldb < std::max(1, transb == CUBLAS_OP_N ? k : n) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (a_type != b_type || c_type != CUDA_R_32F || compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (is_device(alpha, 4) || is_device(beta, 4)) fail("cublasGemmEx: alpha and beta must be host memory");
  const bool a_ok = transa == CUBLAS_OP_N ? device_matrix(A, a_type, m, k, lda) : device_matrix(A, a_type, k, m, lda);
  const bool b_ok = transb == CUBLAS_OP_N ? device_matrix(B, b_type, k, n, ldb) : device_matrix(B, b_type, n, k, ldb);
  if (!a_ok || !b_ok || !device_matrix(C, c_type, m, n, ldc)) fail("cublasGemmEx: a matrix is not device memory");
  const double a = *static_cast<const float*>(alpha), b = *static_cast<const float*>(beta);  // read when called
  enqueue(stream, [=] {
    access_scope scope;
    // op(A) row i and op(B) column j widened once into contiguous rows of k floats: the same products summed in
    // the same order as reading them in place, without a type switch and a strided read per product.
    thread_local std::vector<float> a_rows, b_cols;  // kept by the stream's thread: no fresh pages per call
    widen_rows(A, a_type, lda, m, k, transa == CUBLAS_OP_N, a_rows);
    widen_rows(B, b_type, ldb, n, k, transb != CUBLAS_OP_N, b_cols);
    auto* c = static_cast<float*>(C);
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        const float* ar = a_rows.data() + size_t(i) * k;
        const float* bc = b_cols.data() + size_t(j) * k;
        double sum = 0;
        for (int l = 0; l < k; ++l) sum += double(ar[l]) * double(bc[l]);
        float& out = c[size_t(i) + size_t(j) * ldc];
        out = float(a * sum + (b == 0 ? 0.0 : b * out));  // beta 0: C is not read (it may hold NaN)
      }
  });
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace illm_emu
