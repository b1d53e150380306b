#include "gpu/backend_registry.hpp"

#include <cstdio>
#include <mutex>
#include <thread>

#include "gpu/cpu/cpu_backend.hpp"
#include "gpu/text.hpp"
#if ILLM_HAVE_CUDA
#include "gpu/cuda/cuda_backend.hpp"
#endif

namespace illm::gpu {

namespace {

/// The factory provide_cuda installed (empty: this build's own).
cuda_factory& provided_cuda() {
  static cuda_factory make;
  return make;
}

/// Tells stderr, once per process, why "auto" runs on the cpu.
void say_cpu_fallback(const std::string& why) {
  static std::once_flag once;
  std::call_once(once, [&] { std::fprintf(stderr, "illm: %s; running on the cpu backend\n", why.c_str()); });
}

result<std::unique_ptr<backend>> make_cuda(int device = 0) {
  if (provided_cuda()) return provided_cuda()(device);
#if ILLM_HAVE_CUDA
  cuda::cuda_options options;
  options.device = device;
  auto made = cuda::cuda_backend::create(options);
  if (!made.is_ok()) return made.error();
  return std::unique_ptr<backend>(std::move(made).value());
#else
  return status{status_code::unsupported, cuda_unavailable_reason()};
#endif
}

/// The cuda backend when this build has it and a GPU is present; otherwise nothing, and why.
result<std::unique_ptr<backend>> auto_gpu() {
  const std::string why_not = cuda_unavailable_reason();
  if (!why_not.empty()) return status{status_code::unsupported, why_not};
  return make_cuda();
}

}  // namespace

std::vector<std::string> compiled_backends() {
  if (provided_cuda()) return {"cpu", "cuda"};
#if ILLM_HAVE_CUDA
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

std::optional<int> cuda_device_of(const std::string& name) {
  if (name == "cuda") return 0;
  if (name.rfind("cuda:", 0) != 0) return std::nullopt;
  const std::string index = name.substr(5);
  if (index.empty() || index.size() > 4 || index.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  return std::stoi(index);
}

void provide_cuda(cuda_factory make) { provided_cuda() = std::move(make); }

std::string cuda_unavailable_reason() {
  if (provided_cuda()) return "";
#if ILLM_HAVE_CUDA
  const cuda::device_probe probe = cuda::probe_devices();
  return probe.count > 0 ? "" : "no CUDA device (" + probe.reason + ")";
#else
  return "this build has no CUDA backend";
#endif
}

result<std::unique_ptr<backend>> make_backend(const std::string& name, int cpu_threads) {
  if (cpu_threads < 0) return status{status_code::invalid_argument, "thread count must be >= 0"};
  const int threads = cpu_threads > 0 ? cpu_threads : int(std::max(1u, std::thread::hardware_concurrency()));
  if (name == "auto") {
    auto gpu = auto_gpu();
    if (gpu.is_ok()) return gpu;
    say_cpu_fallback(gpu.error().message());
  }
  if (name.rfind("cuda", 0) == 0) {
    const std::optional<int> device = cuda_device_of(name);
    if (!device) return status{status_code::invalid_argument, text::format("backend '{}': cuda:N names GPU N", name)};
    return make_cuda(*device);
  }
  if (name == "cpu" || name == "auto")
    return std::unique_ptr<backend>(std::make_unique<cpu::cpu_backend>(threads, cpu::cpu_mode::fast));
  if (name == "cpu-reference")
    return std::unique_ptr<backend>(std::make_unique<cpu::cpu_backend>(threads, cpu::cpu_mode::reference));
  return status{status_code::unsupported, text::format("backend '{}' is not in this build (built: {})", name,
                                                      text::join(compiled_backends(), ", "))};
}

}  // namespace illm::gpu
