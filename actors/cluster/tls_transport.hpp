#pragma once
// Mutual TLS under CAF's middleman: a middleman actor of our own whose connections (the ports it opens and those it
// connects to) run CAF's protocol over TLS. One OpenSSL context per process: TLS 1.2 or newer, this process's
// certificate and key, and peers required to present a certificate signed by the cluster's CA. Each OpenSSL call
// starts from an empty error queue (the queue is per thread, shared by every connection of the I/O thread: a stale
// error would end a healthy connection), and a handshake that fails is reported, on the accepting side as on the
// connecting one.
#include <functional>
#include <memory>
#include <string>

#include <caf/fwd.hpp>
#include <caf/io/middleman_actor.hpp>

#include "actors/settings/settings.hpp"
#include "gpu/status.hpp"

namespace illm::actors {

/// Told of every TLS handshake that failed: the peer's address, whether this side accepted the connection, and
/// OpenSSL's reason. Called on CAF's I/O thread.
using tls_refusal_handler = std::function<void(const std::string& peer, bool accepted, const std::string& why)>;

/// Spawns the TLS middleman actor of `sys` on the files of `s` (checked first: check_control_security); every
/// refused handshake goes to `on_refused`. The actor serves the middleman interface (publish, open, connect).
gpu::result<caf::io::middleman_actor> spawn_tls_middleman(caf::actor_system& sys, const control_security& s,
                                                           tls_refusal_handler on_refused);

}  // namespace illm::actors
