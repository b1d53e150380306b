// illm-gpu-bench [--quick] [--layers N] [--device N] [--json FILE]: the figures of gpu/bench/gpu_bench.hpp
// as tables on stdout (and as JSON in FILE); progress on stderr. Exits 77 when there is no CUDA device, and 1
// when a part did not run (every part is asked for) or the runtime part failed its checks.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "gpu/bench/gpu_bench.hpp"

int main(int argc, char** argv) {
  using namespace illm::gpu;
  cuda::gpu_bench_options options;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--quick")) {
      options.quick = true;
    } else if (!std::strcmp(argv[i], "--layers") && has_value) {
      options.layers = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--device") && has_value) {
      options.device = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--json") && has_value) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--layers N] [--device N] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  const cuda::device_probe probe = cuda::probe_devices();
  if (probe.count == 0) {
    std::printf("illm-gpu-bench: no CUDA device (%s); nothing measured\n", probe.reason.c_str());
    return 77;
  }
  options.progress = [](std::string_view what) {
    std::fprintf(stderr, "illm-gpu-bench: %.*s\n", int(what.size()), what.data());
  };
  auto result = cuda::run_gpu_bench(options);
  if (!result.is_ok()) {
    std::fprintf(stderr, "illm-gpu-bench: %s\n", result.error().message().c_str());
    return 1;
  }
  std::fputs(cuda::to_text(result.value()).c_str(), stdout);
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << cuda::to_json(result.value());
    if (!out) {
      std::fprintf(stderr, "illm-gpu-bench: cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  const cuda::runtime_figure& runtime = result->runtime;
  if (!runtime.measured || result->attention.empty() || result->decode.empty() || result->dist.empty()) {
    std::fprintf(stderr, "illm-gpu-bench: a part did not run (attention %zu points, distributed %zu, decode %zu, "
                         "runtime %s); notes:\n",
                 result->attention.size(), result->dist.size(), result->decode.size(),
                 runtime.measured ? "measured" : "not measured");
    for (const std::string& note : result->notes) std::fprintf(stderr, "  %s\n", note.c_str());
    return 1;
  }
  if (!runtime.passed()) {
    std::fprintf(stderr, "illm-gpu-bench: the runtime over device pools %s\n",
                 runtime.moves_intact ? "gave other ids than one pool" : "changed blocks it moved");
    return 1;
  }
  return 0;
}
