#pragma once
// Picks a backend by name: the ones compiled into this build, and the default for this machine.

#include <memory>
#include <string>
#include <vector>

#include "gpu/backend.hpp"

namespace illm::gpu {

/// Backends compiled into this build, e.g. {"cpu", "cuda"}.
std::vector<std::string> compiled_backends();

/// Why the cuda backend cannot run here ("this build has no CUDA backend", "no CUDA device (...)"); empty when it
/// can (this build has it and a GPU is present).
std::string cuda_unavailable_reason();

/// Makes backend `name`: "cpu", "cpu-reference", "cuda" (unsupported when the build or the machine has
/// none), or "auto": cuda when this build has it and a GPU is present, else cpu, which it says once on
/// stderr with the reason. `cpu_threads` threads for cpu work (0: every core).
result<std::unique_ptr<backend>> make_backend(const std::string& name, int cpu_threads);

}  // namespace illm::gpu
