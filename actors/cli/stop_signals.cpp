#include "actors/cli/stop_signals.hpp"

#include <pthread.h>

#include <ctime>

namespace illm::cli {

namespace {

/// A stop signal that reached a thread started before the signals were blocked (a library's, e.g. OpenBLAS's
/// workers, made when it loads): caught here instead of ending the process, and taken up by the waiting thread.
std::atomic<int> caught_elsewhere{0};

void catch_stop_signal(int signal) { caught_elsewhere.store(signal); }

}  // namespace

sigset_t block_stop_signals() {
  struct sigaction caught {};
  caught.sa_handler = &catch_stop_signal;
  sigemptyset(&caught.sa_mask);
  sigaction(SIGINT, &caught, nullptr);
  sigaction(SIGTERM, &caught, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  return set;
}

namespace {

/// From now on SIGINT and SIGTERM do nothing, whichever thread they reach.
void ignore_stop_signals() {
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGINT, &ignore, nullptr);
  sigaction(SIGTERM, &ignore, nullptr);
}

}  // namespace

int wait_for_stop_signal(const sigset_t& set, const std::atomic<bool>& stop) {
  const timespec period{0, 100'000'000};
  while (!stop.load()) {
    int s = sigtimedwait(&set, nullptr, &period);
    if (s <= 0) s = caught_elsewhere.exchange(0);
    if (s > 0) {
      ignore_stop_signals();
      return s;
    }
  }
  return 0;
}

const char* stop_signal_name(int signal) { return signal == SIGINT ? "SIGINT" : "SIGTERM"; }

}  // namespace illm::cli
