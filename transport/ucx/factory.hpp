#pragma once
// The UCX plane as the registry makes it. CMake compiles factory.cpp where UCX is found and absent.cpp
// (which says so) elsewhere, so that no caller needs to know whether this build has UCX.

#include "transport/registry.hpp"

namespace illm::transport {

/// Whether this build has the UCX plane.
bool ucx_built();

/// A UCX plane for `options.self` on `options.tls` and `options.net_devices`.
result<std::shared_ptr<data_plane>> make_ucx_plane(const plane_options& options);

}  // namespace illm::transport
