#include "gpu/backend_registry.hpp"

#include <thread>

#include <fmt/format.h>

#include "gpu/cpu/cpu_backend.hpp"

namespace illm::gpu {

const char* to_string(dtype t) {
  switch (t) {
    case dtype::f32: return "f32";
    case dtype::f16: return "f16";
    case dtype::bf16: return "bf16";
  }
  return "unknown";
}

std::vector<std::string> compiled_backends() { return {"cpu"}; }

result<std::unique_ptr<backend>> make_backend(const std::string& name, int cpu_threads) {
  if (cpu_threads < 0) return status{status_code::invalid_argument, "thread count must be >= 0"};
  const int threads = cpu_threads > 0 ? cpu_threads : int(std::max(1u, std::thread::hardware_concurrency()));
  if (name == "cpu" || name == "auto")
    return std::unique_ptr<backend>(std::make_unique<cpu::cpu_backend>(threads, cpu::cpu_mode::fast));
  if (name == "cpu-reference")
    return std::unique_ptr<backend>(std::make_unique<cpu::cpu_backend>(threads, cpu::cpu_mode::reference));
  return status{status_code::unsupported, fmt::format("backend '{}' is not in this build (built: {})", name,
                                                      fmt::join(compiled_backends(), ", "))};
}

}  // namespace illm::gpu
