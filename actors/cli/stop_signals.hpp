#pragma once
// SIGINT and SIGTERM for the long-running commands (serve, gmanager, instance): blocked in every thread and
// waited for in one, so that a stop runs its graceful path; once it has begun, further ones are ignored (a
// shell that forwards the terminal's signal to its child, or a supervisor that repeats it, would otherwise
// end the process halfway through its stop). The stop is bounded by its own timeouts; SIGKILL ends it at once.

#include <signal.h>

#include <atomic>

namespace illm::cli {

/// Blocks SIGINT and SIGTERM in this thread and every thread started from it (a thread started before, which
/// leaves them unblocked, catches them for the waiting one); returns the set to wait on.
sigset_t block_stop_signals();

/// Waits for SIGINT or SIGTERM (returns it, and ignores any further one from then on) or for `stop` (0).
int wait_for_stop_signal(const sigset_t& set, const std::atomic<bool>& stop);

/// "SIGINT" or "SIGTERM".
const char* stop_signal_name(int signal);

}  // namespace illm::cli
