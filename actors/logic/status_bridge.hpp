#pragma once
// The engine's view of a data-plane failure: where the runtime hands a transport status to gpu/ (a
// remote attention that failed, a move that did not arrive), it becomes the engine's status.

#include "gpu/status.hpp"
#include "transport/status.hpp"

namespace illm::actors {

/// The engine's status for a data-plane status (the same code where gpu/ has one, the same message).
inline gpu::status engine_status(const transport::status& s) {
  using transport::status_code;
  switch (s.code) {
    case status_code::ok: return gpu::status::ok();
    case status_code::invalid_argument: return {gpu::status_code::invalid_argument, s.message};
    case status_code::io_error: return {gpu::status_code::io_error, s.message};
    case status_code::out_of_memory: return {gpu::status_code::out_of_memory, s.message};
    case status_code::unsupported: return {gpu::status_code::unsupported, s.message};
    case status_code::backend_error: return {gpu::status_code::backend_error, s.message};
    case status_code::internal: break;
  }
  return {gpu::status_code::internal, s.message};
}

}  // namespace illm::actors
