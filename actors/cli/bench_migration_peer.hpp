#pragma once
// `illm bench migration`'s two processes (internal to the command): its flags, and the peer, this binary again
// (`illm bench migration --peer-fd N`) on one end of a socketpair that carries its UCX worker address and
// registered region, the checksum requests and the stop. It dies with the parent (PR_SET_PDEATHSIG, and it
// stops when the socket closes); the parent stops and reaps it on every path, errors included.

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "transport/status.hpp"
#include "transport/registry.hpp"

namespace illm::cli::migration {

using transport::result;
using transport::status;
using transport::status_code;
using bench_clock = std::chrono::steady_clock;

/// Flags of `illm bench migration` (and of its hidden peer mode).
struct migration_flags {
  bool json = false;
  int batch = 8;
  int steps = 8;     ///< timed decode steps per phase and round
  int rounds = 15;   ///< rounds of the three phases
  int context = 32;  ///< prefilled tokens per sequence
  int threads = 2;
  uint64_t seed = 1;
  std::string tls = "tcp";
  std::string net_devices = "lo";
  int peer_fd = -1;          ///< hidden: run as the peer on this socket
  uint64_t arena_bytes = 0;  ///< hidden: the peer's receive arena
};

constexpr std::chrono::seconds peer_ready_bound{60};
constexpr std::chrono::seconds peer_reply_bound{120};
constexpr std::chrono::seconds peer_exit_bound{10};
constexpr uint32_t parent_peer_id = 1, child_peer_id = 2;

/// A UCX plane for peer `self` on the run's transports.
result<std::shared_ptr<transport::data_plane>> make_ucx_plane(const migration_flags& f, transport::peer_id self);

/// Runs as the peer: a plane with a registered arena, its progress thread receiving the parent's puts; answers
/// checksum requests until the parent says stop or goes away.
void run_peer(const migration_flags& f);

/// What the peer sends once it is ready.
struct peer_ready {
  transport::remote_region region;
  std::vector<uint8_t> worker_address;
};

/// The peer process: started from this binary, stopped and reaped by the destructor whatever happens.
class peer_process {
 public:
  /// Starts `/proc/self/exe bench migration --peer-fd N ...` on one end of a fresh socketpair.
  static result<std::unique_ptr<peer_process>> spawn(const migration_flags& f);
  ~peer_process();
  pid_t pid() const { return pid_; }
  /// Waits for the peer's region and worker address (or the reason it could not start).
  result<peer_ready> wait_ready();
  /// Asks the peer for the checksum of its arena's first `bytes` bytes (which it then clears).
  result<uint64_t> checksum(uint64_t bytes);
  /// Tells the peer to stop, waits for it (killing it after a bound) and reaps it; returns its exit
  /// status (128 + signal when killed). Idempotent.
  int stop();

 private:
  peer_process(pid_t pid, int fd) : pid_(pid), fd_(fd) {}
  [[noreturn]] static void exec_peer(pid_t parent, int fd, int devnull, char** argv);
  std::string exited();

  pid_t pid_;
  int fd_;
  std::optional<int> exit_code_;
};

}  // namespace illm::cli::migration
