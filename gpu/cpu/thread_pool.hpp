#pragma once
// A small fork-join pool for the CPU backend. Work is split into items that threads claim one at a
// time, and the caller (thread 0) claims items too, so a worker that the OS has not scheduled yet
// delays nothing: the caller finishes the items alone. Workers spin briefly between jobs (a decode
// step dispatches dozens of short jobs) and then sleep.

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

  /// Splits [0, n) into contiguous ranges (a few per thread) and runs fn(begin, end) on each.
  void parallel_for(int64_t n, const std::function<void(int64_t begin, int64_t end)>& fn);

  /// Runs fn(item, thread) for every item of [0, n), each claimed by whichever thread is free.
  void parallel_for_dynamic(int64_t n, const std::function<void(int64_t item, int thread)>& fn);

 private:
  void worker_loop(int thread);
  void claim_items(int thread);

  std::vector<std::thread> workers_;
  // The current job; written only while no worker is inside it (active_ == 0).
  const std::function<void(int64_t, int)>* job_ = nullptr;
  int64_t job_items_ = 0;
  std::atomic<int64_t> next_item_{0};
  std::atomic<bool> open_{false};  // workers may enter the job
  std::atomic<int> active_{0};     // workers inside the job
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};  // workers blocked in wait(); a job wakes them only when needed
  std::atomic<bool> stop_{false};
};

}  // namespace illm::gpu::cpu
