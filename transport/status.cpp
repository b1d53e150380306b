#include "transport/status.hpp"

namespace illm::transport {

const char* to_string(status_code code) {
  switch (code) {
    case status_code::ok: return "ok";
    case status_code::invalid_argument: return "invalid argument";
    case status_code::io_error: return "network or peer failure";
    case status_code::out_of_memory: return "out of memory";
    case status_code::unsupported: return "unsupported";
    case status_code::backend_error: return "communication library error";
    case status_code::internal: return "internal error";
  }
  return "unknown";
}

}  // namespace illm::transport
