#pragma once
// The long-running commands (serve, instance) give the heap's free pages back to the system every few seconds.
// glibc keeps the memory a burst of requests freed in its per-thread arenas, so a process's resident memory
// would creep up to the most it ever held at once; given back, it follows what is in use.

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace illm::cli {

/// Trims the heap every `period` while it lives.
class periodic_trim {
 public:
  explicit periodic_trim(std::chrono::milliseconds period = std::chrono::seconds(10));
  ~periodic_trim();
  periodic_trim(const periodic_trim&) = delete;
  periodic_trim& operator=(const periodic_trim&) = delete;

 private:
  std::mutex mutex_;
  std::condition_variable stopping_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace illm::cli
