#pragma once
// `--backend` (and the `backend` configuration key of illm serve) of the commands that start instances: illm
// serve, illm instance and illm generate --instances. It says which backend an instance's engine, KV pool and
// attention servers run on.

#include <string>

namespace CLI {
class App;
}

namespace illm::cli {

/// The backend names --backend takes.
inline constexpr const char* backend_choices = "cpu, cuda or auto";

/// The backend the instances run on when `asked` ("cpu", "cuda" or "auto") is asked for by `command`. "auto" is
/// cuda where this build has it and a GPU is present, else cpu. "cuda" without them fails (status 2) with why (no
/// GPU, no driver, or no CUDA backend in this build).
std::string instance_backend(const std::string& asked, const std::string& command);

/// Adds `--devices 0,1,...` (instance_settings::devices: the GPUs of the cuda backend) to `cmd`, read into
/// `devices`; a value that is no list of GPU indexes is refused with a clear error.
void add_devices_flag(CLI::App& cmd, std::string& devices);

/// Adds `--backend` (what `who` runs on: "this instance", "the embedded instances") and `--devices` to `cmd`.
void add_backend_flags(CLI::App& cmd, std::string& backend, std::string& devices, const std::string& who);

}  // namespace illm::cli
