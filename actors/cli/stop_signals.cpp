#include "actors/cli/stop_signals.hpp"

#include <pthread.h>

#include <ctime>

namespace illm::cli {

sigset_t block_stop_signals() {
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
    const int s = sigtimedwait(&set, nullptr, &period);
    if (s > 0) {
      ignore_stop_signals();
      return s;
    }
  }
  return 0;
}

const char* stop_signal_name(int signal) { return signal == SIGINT ? "SIGINT" : "SIGTERM"; }

}  // namespace illm::cli
