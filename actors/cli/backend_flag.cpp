#include "actors/cli/backend_flag.hpp"

#include <CLI/CLI.hpp>

#include <cstdio>

#include "actors/cli/commands.hpp"
#include "actors/settings/settings.hpp"
#include "gpu/backend_registry.hpp"

namespace illm::cli {

std::string instance_backend(const std::string& asked, const std::string& command) {
  if (asked == "cpu") return "cpu";
  const std::string no_gpu = gpu::cuda_unavailable_reason();
  if (asked == "auto") {
    if (no_gpu.empty()) return "cuda";
    std::fprintf(stderr, "illm %s: %s; the instances run on the cpu backend\n", command.c_str(), no_gpu.c_str());
    return "cpu";
  }
  if (asked == "cuda") {
    if (no_gpu.empty()) return "cuda";
    fail("illm " + command + " --backend cuda: " + no_gpu + "; use --backend cpu or auto", 2);
  }
  fail("illm " + command + ": --backend must be " + backend_choices + ", not '" + asked + "'", 2);
}

void add_devices_flag(CLI::App& cmd, std::string& devices) {
  cmd.add_option("--devices", devices,
                 "GPUs of the cuda backend, e.g. 0,1: instance i runs on the (i mod n)-th; instances sharing a GPU "
                 "each have their own pool (default: GPU 0)")
      ->check([](const std::string& value) -> std::string {
        return actors::parse_devices(value) ? "" : "a list of GPU indexes such as 0,1, not '" + value + "'";
      });
}

void add_backend_flags(CLI::App& cmd, std::string& backend, std::string& devices, const std::string& who) {
  cmd.add_option("--backend", backend, "What " + who + " run on: " + backend_choices + " (default cpu)");
  add_devices_flag(cmd, devices);
}

}  // namespace illm::cli
