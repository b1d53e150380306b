// This build has no UCX (ILLM_ENABLE_UCX off, or libucx-dev missing): the registry says so.
#include "transport/ucx/factory.hpp"

namespace illm::transport {

bool ucx_built() { return false; }

result<std::shared_ptr<data_plane>> make_ucx_plane(const plane_options&) {
  return status{status_code::unsupported,
                "this build has no UCX plane (configure with -DILLM_ENABLE_UCX=ON and libucx-dev installed)"};
}

}  // namespace illm::transport
