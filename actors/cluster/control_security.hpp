#pragma once
// The control plane's security. With TLS (--tls-ca, --tls-cert, --tls-key), every control connection of a process
// (the gManager's port, an instance's control port, the links to them) goes through CAF's OpenSSL module with
// mutual authentication: each side presents its certificate and requires the peer's to be signed by the
// cluster's CA, so a process without such a certificate can neither join nor read the view. Without TLS a
// process listens only on loopback unless told --insecure.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include <caf/fwd.hpp>
#include <caf/io/middleman_actor.hpp>

#include "actors/settings/settings.hpp"
#include "gpu/status.hpp"

namespace illm::actors {

/// Checks the TLS files before CAF reads them inside its I/O thread (where a bad one ends the process): all three
/// or none, each a readable PEM file, the key that of the certificate, the certificate signed by the CA and valid
/// now. The error says which file and why.
gpu::status check_control_security(const control_security& s);

/// Whether this process may listen on `host` (`what` names the flag in the error): anywhere with TLS or
/// --insecure, else only on a loopback address.
gpu::status check_listen_host(const control_security& s, const std::string& host, const std::string& what);

/// A CAF configuration for a networked process: its messages registered, its middleman loaded.
std::unique_ptr<caf::actor_system_config> networked_config();

/// The TLS actor of a process's control plane while it runs (none without TLS): it is stopped when this ends,
/// which must come before the end of its actor system (declare it after the system).
class control_plane {
 public:
  control_plane() = default;
  explicit control_plane(caf::actor_system& sys) : sys_(&sys) {}
  control_plane(control_plane&& other) noexcept : sys_(std::exchange(other.sys_, nullptr)) {}
  control_plane& operator=(control_plane&& other) noexcept;
  control_plane(const control_plane&) = delete;
  control_plane& operator=(const control_plane&) = delete;
  ~control_plane() { stop(); }
  /// Stops the TLS actor and waits (up to a few seconds) until it is gone.
  void stop();

 private:
  caf::actor_system* sys_ = nullptr;
};

/// With TLS, starts the actor that makes every control connection of `sys` mutual TLS on the files of `s`
/// (actors/cluster/tls_transport.hpp); each handshake that fails is logged with `who`. Without TLS, nothing.
gpu::result<control_plane> start_control_plane(caf::actor_system& sys, const control_security& s,
                                               const std::string& who);

/// The actor that listens on control ports and connects to them: the TLS one when start_control_plane started
/// it, else the middleman's.
caf::io::middleman_actor control_connector(caf::actor_system& sys);

/// Publishes actor `whom` (of interface `types`) on `host`:`port` (0: any free port) through
/// control_connector; the port bound.
caf::expected<uint16_t> publish_control(caf::actor_system& sys, const caf::strong_actor_ptr& whom,
                                        std::set<std::string> types, uint16_t port, const std::string& host);

/// Opens a control port (no actor on it: peers connect so that their messages come directly) on `host`:`port`
/// through control_connector; the port bound.
caf::expected<uint16_t> open_control(caf::actor_system& sys, uint16_t port, const std::string& host);

/// Whether a failed connect was the peer refusing this process (the TCP connection was made, the handshake
/// failed: a TLS peer that does not accept its certificate, or a plain one it cannot talk to), not an address
/// where nothing listens.
bool refused_by_peer(const caf::error& e);

}  // namespace illm::actors
