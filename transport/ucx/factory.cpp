#include "transport/ucx/factory.hpp"

#include "transport/ucx/ucx_plane.hpp"

namespace illm::transport {

bool ucx_built() { return true; }

result<std::shared_ptr<data_plane>> make_ucx_plane(const plane_options& options) {
  ucx_options uo;
  uo.tls = options.tls;
  uo.net_devices = options.net_devices;
  auto made = ucx_plane::create(options.self, uo);
  if (!made.is_ok()) return made.error();
  return std::shared_ptr<data_plane>(std::move(made).value());
}

}  // namespace illm::transport
