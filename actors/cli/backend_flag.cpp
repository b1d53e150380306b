#include "actors/cli/backend_flag.hpp"

#include <cstdio>

#include "actors/cli/commands.hpp"
#include "gpu/backend_registry.hpp"

namespace illm::cli {

std::string instance_backend(const std::string& asked, const std::string& command) {
  const std::string no_gpu = gpu::cuda_unavailable_reason();
  const char* host_pools = "an instance's KV pool, engine and attention servers run on the cpu backend so far "
                           "(illm generate and illm bench engine run on cuda)";
  if (asked == "cpu") return "cpu";
  if (asked == "auto") {
    if (no_gpu.empty()) std::fprintf(stderr, "illm %s: a GPU is present, but %s\n", command.c_str(), host_pools);
    return "cpu";
  }
  if (asked == "cuda")
    fail("illm " + command + " --backend cuda: " + (no_gpu.empty() ? std::string(host_pools) : no_gpu) +
             "; use --backend cpu or auto",
         2);
  fail("illm " + command + ": --backend must be " + backend_choices + ", not '" + asked + "'", 2);
}

}  // namespace illm::cli
