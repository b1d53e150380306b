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

void thread_pool::claim_items(int thread) {
  for (int64_t i = next_item_.fetch_add(1); i < job_items_; i = next_item_.fetch_add(1)) (*job_)(i, thread);
}

void thread_pool::worker_loop(int thread) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t current = generation_.load();
    for (int i = 0; current == seen && i < spin_iterations; ++i) {
      cpu_relax();
      current = generation_.load();
    }
    if (current == seen) {
      sleepers_.fetch_add(1);
      generation_.wait(seen);
      sleepers_.fetch_sub(1);
      continue;
    }
    seen = current;
    if (stop_.load()) return;
    active_.fetch_add(1);
    if (open_.load()) claim_items(thread);  // a job that already closed is left alone
    active_.fetch_sub(1);
  }
}

void thread_pool::parallel_for_dynamic(int64_t n, const std::function<void(int64_t, int)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  job_ = &fn;
  job_items_ = n;
  next_item_.store(0);
  open_.store(true);
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) generation_.notify_all();
  claim_items(0);
  open_.store(false);
  // Workers that entered may still be finishing their last item.
  for (int spins = 0; active_.load() != 0; ++spins) {
    if (spins < spin_iterations)
      cpu_relax();
    else
      std::this_thread::yield();
  }
}

void thread_pool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  const int64_t chunk = std::max<int64_t>(1, (n + 4 * size() - 1) / (4 * size()));
  parallel_for_dynamic((n + chunk - 1) / chunk, [&](int64_t item, int) {
    fn(item * chunk, std::min(n, (item + 1) * chunk));
  });
}

}  // namespace illm::gpu::cpu
