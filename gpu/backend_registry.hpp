#pragma once
// Picks a backend by name: the ones compiled into this build, and the default for this machine.

#include <memory>
#include <string>
#include <vector>

#include "gpu/backend.hpp"

namespace illm::gpu {

/// Backends compiled into this build, e.g. {"cpu"}.
std::vector<std::string> compiled_backends();

/// Makes backend `name` ("cpu", "cpu-reference", or "auto": the best available here) with
/// `cpu_threads` threads for cpu work (0: every core).
result<std::unique_ptr<backend>> make_backend(const std::string& name, int cpu_threads);

}  // namespace illm::gpu
