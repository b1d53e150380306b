#pragma once
// Data planes made by name, as gpu/'s backends are: "inproc" (the endpoints of one process share a group),
// "ucx" (between processes and hosts; an error where this build has no UCX), "sim" (the simulator's,
// which moves no bytes), and "faulty:KIND", a plane of KIND that injects the faults of a spec. Callers
// never name an implementation's type, and no caller needs to know which were compiled in: CMake
// decides, and plane_kinds() says.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "transport/transport.hpp"

namespace illm::transport {

/// What the planes of one process that talk in-process share (an inproc fabric); opaque to callers.
class plane_group {
 public:
  virtual ~plane_group() = default;
};

/// Completes a put of `bytes` from `from` to `to` when they would have arrived (the simulator's clock).
using put_timer = std::function<void(peer_id from, peer_id to, uint64_t bytes, completion done)>;

/// What a plane is made with; each kind reads its own fields.
struct plane_options {
  peer_id self = 0;                     ///< this endpoint's peer id
  std::string tls = "tcp";              ///< ucx: UCX_TLS (shared memory cannot tell a dead peer: keep tcp)
  std::string net_devices = "lo";       ///< ucx: UCX_NET_DEVICES (always set: unset, UCX takes every interface)
  std::shared_ptr<plane_group> group;   ///< inproc: the group its peers are in (make_plane_group("inproc"))
  put_timer timer;                      ///< sim: when a put's bytes would arrive (none: at once)
  std::string faults;                   ///< faulty:KIND: the fault spec (transport/faulty/fault_spec.hpp)
};

/// A group for planes of `kind` that share one (inproc); none for the others.
std::shared_ptr<plane_group> make_plane_group(std::string_view kind);

/// A plane of `kind`; an error names the kinds this build has when `kind` is not one of them.
result<std::shared_ptr<data_plane>> make_plane(std::string_view kind, const plane_options& options);

/// The kinds of plane this build makes.
std::vector<std::string> plane_kinds();

}  // namespace illm::transport
