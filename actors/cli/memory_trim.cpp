#include "actors/cli/memory_trim.hpp"

#include <malloc.h>

namespace illm::cli {

periodic_trim::periodic_trim(std::chrono::milliseconds period)
    : thread_([this, period] {
        std::unique_lock lock(mutex_);
        while (!stopping_.wait_for(lock, period, [this] { return stop_; })) malloc_trim(0);
      }) {}

periodic_trim::~periodic_trim() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  stopping_.notify_all();
  thread_.join();
}

}  // namespace illm::cli
