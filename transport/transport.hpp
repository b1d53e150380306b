#pragma once
// The data plane: KV block migration (bulk puts into memory the destination registered once and
// reserved through the protocol) and the small query/partial messages of remote attention. Shaped on
// UCX's model: registered memory with packed remote keys, put + flush, and active messages on
// channels. Every call returns at once; completions come back as callbacks, which the actors turn
// into messages. Control traffic (heartbeats, moves, leases) does not come here: it goes over CAF.

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <functional>
#include <span>
#include <vector>

#include "transport/status.hpp"

namespace illm::transport {

/// A process-wide peer: one instance's data-plane endpoint.
using peer_id = uint32_t;

/// What a peer needs to write into registered memory: its address and the packed remote key.
struct remote_region {
  uint64_t address = 0;             ///< start of the region in the owner's address space
  uint64_t bytes = 0;
  std::vector<uint8_t> packed_key;  ///< opaque; UCX's packed rkey, or the in-process region id
};

/// Message channels (UCX active-message ids).
enum class channel : uint8_t {
  attend = 1,    ///< a remote MicroAttention request: queries and block ids
  partials = 2,  ///< its answer: (m, e, MA) per query row
};

/// Called once when an operation is complete (ok) or has failed (the peer is gone, bad region...).
using completion = std::function<void(status)>;

/// Called for every message that arrives on a channel, with the sender and the payload.
using message_handler = std::function<void(peer_id from, std::vector<uint8_t> payload)>;

/// Called once per failed peer (its endpoint reported an error), on the plane's progress thread.
using peer_error_handler = std::function<void(peer_id peer, status why)>;

/// Bytes that crossed the data plane, by kind.
struct traffic {
  uint64_t put_bytes = 0;
  uint64_t message_bytes[3] = {0, 0, 0};  ///< by channel id
  uint64_t messages = 0;
};

/// One endpoint of the data plane.
class data_plane {
 public:
  virtual ~data_plane() = default;

  /// This endpoint's peer id.
  virtual peer_id self() const = 0;

  /// Registers [base, base + bytes) for peers' puts, once (a KV pool arena at start).
  virtual result<remote_region> register_memory(void* base, uint64_t bytes) = 0;

  /// Copies `bytes` from local memory to `remote_address` inside `region` of `peer` (memory the peer
  /// reserved for this copy). `done` runs when the copy has been issued or has failed; the bytes are
  /// visible at the peer after a later flush completes.
  virtual void put(peer_id peer, const void* local, uint64_t bytes, const remote_region& region,
                   uint64_t remote_address, completion done) = 0;

  /// Completes when every earlier put to `peer` is visible there.
  virtual void flush(peer_id peer, completion done) = 0;

  /// Sends a small message on a channel; the peer's handler for that channel receives a copy.
  virtual void send(peer_id peer, channel ch, std::span<const uint8_t> payload, completion done) = 0;

  /// Installs the handler of a channel (before traffic starts).
  virtual void on_message(channel ch, message_handler handler) = 0;

  /// Bytes moved from this endpoint so far.
  virtual traffic counters() const = 0;

  // Between processes. An in-process plane is connected to its peers already: these do nothing there.

  /// This endpoint's address, for peers to connect to (empty: in-process, nothing to exchange).
  virtual std::vector<uint8_t> address() const { return {}; }
  /// Creates the endpoint to `peer` from its address. A peer that failed may be connected again.
  virtual status connect(peer_id, std::span<const uint8_t>) { return status::ok(); }
  /// Closes the endpoint to `peer` at once: its pending operations fail, later ones are refused.
  virtual status disconnect(peer_id) { return status::ok(); }
  /// Installs the handler told when a peer fails (before traffic starts).
  virtual void on_peer_error(peer_error_handler) {}
  /// Starts the plane's background progress, where it needs one (once).
  virtual status start_progress_thread() { return status::ok(); }
  /// Faults this plane injected so far, by kind (a faulty plane's; none for the others).
  virtual std::map<std::string, uint64_t> faults_injected() const { return {}; }
};

}  // namespace illm::transport

/// Declares, inside a plane's class, the data_plane operations every plane defines in its source file: register_memory,
/// put, flush, send and on_message (their briefs are data_plane's). One list, so that a change of the interface is
/// made once for all planes.
#define ILLM_DATA_PLANE_OPERATIONS                                                                                \
  result<remote_region> register_memory(void* base, uint64_t bytes) override;                                     \
  void put(peer_id peer, const void* local, uint64_t bytes, const remote_region& region, uint64_t remote_address, \
           completion done) override;                                                                             \
  void flush(peer_id peer, completion done) override;                                                             \
  void send(peer_id peer, channel ch, std::span<const uint8_t> payload, completion done) override;                \
  void on_message(channel ch, message_handler handler) override
