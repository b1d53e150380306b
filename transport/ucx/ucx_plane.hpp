#pragma once
// The UCX data plane: one UCP context and one worker per plane, for processes and hosts. KV blocks move
// with ucp_put_nbx into memory the peer registered once (ucp_mem_map) and described by a packed rkey;
// queries and partials travel as active messages whose id is the channel and whose header carries the
// sender's peer id (eager and rendezvous both arrive whole). Worker addresses are exchanged out of band
// (over CAF): worker_address() here, connect() there. Endpoints use peer error handling, so a dead
// peer fails its operations with a status naming it instead of hanging them.
//
// Threads: every UCP call is made under one mutex (the worker is UCS_THREAD_MODE_SERIALIZED), so the
// data_plane calls may come from any thread. Operations that reach UCX complete in progress(): either
// the caller calls it, or start_progress_thread() runs it on a background thread that sleeps on the
// worker's event fd (ucp_worker_arm + poll with a short timeout) instead of spinning. Completions,
// message handlers and the peer-error handler then run on that thread, one at a time and in the order
// UCX reported them, never under the plane's mutex (so they may call put/send/flush). A call refused
// before it reaches UCX (bad argument, unknown or failed peer, too many in flight) runs its completion
// at once, on the caller's thread. Nothing throws; UCX errors become statuses with UCX's own text.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "transport/transport.hpp"

namespace illm::transport {

/// How a ucx_plane picks its transports and bounds its work.
struct ucx_options {
  /// UCX_TLS. Shared-memory transports cannot detect a dead peer: keep tcp where that matters.
  std::string tls = "tcp";
  /// UCX_NET_DEVICES: always set it ("lo" on loopback, the veth inside a namespace); empty leaves
  /// UCX's choice, which includes the machine's outside interface.
  std::string net_devices = "lo";
  /// Largest message send() accepts and a receiver takes (larger ones are refused).
  uint64_t max_message_bytes = uint64_t(64) << 20;
  /// Most puts, flushes and sends in flight at once; more are refused.
  uint32_t max_in_flight = 65536;
  /// Milliseconds the progress thread sleeps on the event fd at most before it looks again.
  int poll_timeout_ms = 50;
};

/// A data_plane on one UCP worker.
class ucx_plane final : public data_plane {
 public:
  /// A plane for peer `self`: reads UCX's configuration, applies `options`, creates context and
  /// worker. Fails with UCX's reason when, for instance, no transport in `tls` exists on the devices.
  static result<std::unique_ptr<ucx_plane>> create(peer_id self, const ucx_options& options = {});

  /// Stops the progress thread, closes every endpoint (their pending operations complete with an
  /// error), unmaps registered memory and destroys the worker. Not to be called from a callback.
  ~ucx_plane() override;

  ucx_plane(const ucx_plane&) = delete;
  ucx_plane& operator=(const ucx_plane&) = delete;

  /// This worker's address, to hand to peers out of band.
  std::vector<uint8_t> worker_address() const;
  std::vector<uint8_t> address() const override { return worker_address(); }

  /// Creates the endpoint to `peer` from its worker address (peer error handling on). A peer that
  /// failed may be connected again; a live one may not.
  status connect(peer_id peer, std::span<const uint8_t> address) override;

  /// Closes the endpoint to `peer` at once: its pending operations fail, later ones are refused.
  status disconnect(peer_id peer) override;

  /// Installs the handler told when a peer fails (before traffic starts).
  void on_peer_error(peer_error_handler handler) override;

  /// Progresses the worker (never blocks) and runs the completions and handlers that are ready.
  /// Returns how much happened (0: nothing). Does nothing when called from one of those callbacks.
  unsigned progress();

  /// Starts the background progress thread (once); the destructor stops it.
  status start_progress_thread() override;

  /// Where puts read and write: "host". Debian's UCX has no CUDA transports, so pools registered
  /// here are host memory; a GPU pool would be staged through pinned host memory (see put()).
  const char* memory_path() const { return "host"; }

  /// Messages that arrived by rendezvous (too large for eager), for tests and metrics.
  uint64_t rendezvous_received() const;

  // The data_plane (transport.hpp). A message that arrives on a channel without a handler is dropped
  // (its sender sees a completed send); counters() counts what this plane put and sent successfully.
  peer_id self() const override;
  ILLM_DATA_PLANE_OPERATIONS;
  traffic counters() const override;

  struct impl;  ///< the UCX side, kept out of this header

 private:
  explicit ucx_plane(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

}  // namespace illm::transport
