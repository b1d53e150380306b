#pragma once
// `--backend` (and the `backend` configuration key of illm serve) of the commands that start instances: illm
// serve, illm instance and illm generate --instances. It says which backend an instance's engine, KV pool and
// attention servers run on.

#include <string>

namespace illm::cli {

/// The backend names --backend takes.
inline constexpr const char* backend_choices = "cpu, cuda or auto";

/// The backend the instances run on when `asked` ("cpu", "cuda" or "auto") is asked for by `command`. "auto" is
/// cpu, saying why once on stderr when a GPU is present. "cuda" fails (status 2) with why: no GPU or no CUDA
/// backend in this build, or, with a GPU, that the instances' KV pools live in host memory so far.
std::string instance_backend(const std::string& asked, const std::string& command);

}  // namespace illm::cli
