#pragma once
// A small fork-join pool for the CPU backend: the caller is thread 0 and works too. Workers spin
// briefly between jobs (a decode step dispatches dozens of short jobs) and then sleep.

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace illm::gpu::cpu {

/// Fork-join threads; one job at a time, from one caller thread.
class thread_pool {
 public:
  /// `n_threads` counts the caller; 1 runs everything inline.
  explicit thread_pool(int n_threads);
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  int size() const { return int(workers_.size()) + 1; }

  /// Runs fn(thread, n_threads) once on every thread and returns when all are done.
  void run(const std::function<void(int thread, int n_threads)>& fn);

  /// Splits [0, n) into equal contiguous ranges, one per thread: fn(begin, end).
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

  /// Hands out items of [0, n) one at a time to whichever thread is free: fn(item, thread).
  void parallel_for_dynamic(int64_t n, const std::function<void(int64_t item, int thread)>& fn);

 private:
  void worker_loop(int thread);

  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> sleepers_{0};  // workers blocked in wait(); run() wakes them only when needed
  std::atomic<bool> stop_{false};
};

}  // namespace illm::gpu::cpu
