#include "gpu/cpu/thread_pool.hpp"

#include <algorithm>

namespace illm::gpu::cpu {

namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins this many times for the next job before sleeping (about 100 microseconds).
constexpr int spin_iterations = 20000;

}  // namespace

thread_pool::thread_pool(int n_threads) {
  for (int t = 1; t < std::max(1, n_threads); ++t) workers_.emplace_back([this, t] { worker_loop(t); });
}

thread_pool::~thread_pool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void thread_pool::worker_loop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t current = generation_.load(std::memory_order_acquire);
    for (int i = 0; current == seen && i < spin_iterations; ++i) {
      cpu_relax();
      current = generation_.load(std::memory_order_acquire);
    }
    if (current == seen) {
      sleepers_.fetch_add(1);
      generation_.wait(seen);
      sleepers_.fetch_sub(1);
      continue;
    }
    seen = current;
    if (stop_.load()) return;
    (*job_)(thread, size());
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void thread_pool::run(const std::function<void(int, int)>& fn) {
  if (workers_.empty()) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(int(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) generation_.notify_all();
  fn(0, size());
  while (pending_.load(std::memory_order_acquire) != 0) cpu_relax();
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  run([&](int t, int nt) {
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    if (begin < end) fn(begin, end);
  });
}

void thread_pool::parallel_for_dynamic(int64_t n, const std::function<void(int64_t, int)>& fn) {
  if (n <= 0) return;
  std::atomic<int64_t> next{0};
  run([&](int t, int) {
    for (int64_t i = next.fetch_add(1, std::memory_order_relaxed); i < n;
         i = next.fetch_add(1, std::memory_order_relaxed))
      fn(i, t);
  });
}

}  // namespace illm::gpu::cpu
