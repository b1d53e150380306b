#pragma once
// Picks a backend by name: the ones compiled into this build, and the default for this machine.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpu/backend.hpp"

namespace illm::gpu {

/// Backends compiled into this build, e.g. {"cpu", "cuda"}.
std::vector<std::string> compiled_backends();

/// Why the cuda backend cannot run here ("this build has no CUDA backend", "no CUDA device (...)"); empty when it
/// can (this build has it and a GPU is present).
std::string cuda_unavailable_reason();

/// Makes a cuda backend on the GPU of that index.
using cuda_factory = std::function<result<std::unique_ptr<backend>>(int device)>;

/// From now on, "cuda" (and "auto") in this process make their backend with `make`, whatever this build and
/// machine have: how a test runs the runtime, unchanged, on the CPU emulation of CUDA. Call before any backend
/// is made.
void provide_cuda(cuda_factory make);

/// The GPU a backend name runs on: N for "cuda:N", 0 for "cuda"; nothing for other names or a malformed index.
std::optional<int> cuda_device_of(const std::string& name);

/// Makes backend `name`: "cpu", "cpu-reference", "cuda" (unsupported when the build or the machine has
/// none; "cuda:N" on GPU N, "cuda" on GPU 0), or "auto": cuda when this build has it and a GPU is present, else cpu, which it says once on
/// stderr with the reason. `cpu_threads` threads for cpu work (0: every core).
result<std::unique_ptr<backend>> make_backend(const std::string& name, int cpu_threads);

}  // namespace illm::gpu
