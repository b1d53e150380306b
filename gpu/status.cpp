#include "gpu/status.hpp"

namespace illm::gpu {

const char* to_string(status_code code) {
  switch (code) {
    case status_code::ok: return "ok";
    case status_code::invalid_argument: return "invalid argument";
    case status_code::io_error: return "I/O error";
    case status_code::corrupt_model: return "corrupt model";
    case status_code::out_of_memory: return "out of memory";
    case status_code::out_of_blocks: return "out of KV blocks";
    case status_code::unsupported: return "unsupported";
    case status_code::backend_error: return "backend error";
    case status_code::internal: return "internal error";
  }
  return "unknown";
}

}  // namespace illm::gpu
