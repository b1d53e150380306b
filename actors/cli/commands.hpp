#pragma once
// The subcommands of `illm`; each registers its options and runs from its callback. A failure is
// reported once on stderr and ends the process with a non-zero status (CLI::RuntimeError).

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "gpu/model_files.hpp"

namespace illm::actors {
struct control_endpoint;
struct control_security;
}

namespace illm::cli {

/// `illm generate`: one request on the real model, optionally over several KV pools.
void add_generate_command(CLI::App& app);

/// `illm bench engine`: decode and prefill throughput, MicroAttention bandwidth, DistAttention against
/// its alternatives, as a table or one JSON object.
void add_bench_command(CLI::App& app);

/// `illm serve`: the embedded cluster behind the OpenAI-compatible HTTP API.
void add_serve_command(CLI::App& app);

/// `illm profile`: the performance model measured on a backend, or checked (--validate).
void add_profile_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);

/// `illm sim`: the cluster simulator.
void add_sim_command(CLI::App& app);

/// `illm chaos`: seeded fault scenarios on an embedded cluster, with their books.
void add_chaos_command(CLI::App& app);

/// `illm gmanager`: the gManager of a cluster of processes, on a TCP port of CAF's io middleman.
void add_gmanager_command(CLI::App& app);
/// `illm instance --join`: one instance of a cluster of processes.
void add_instance_command(CLI::App& app);

/// An address given as HOST:PORT, :PORT or PORT (host 127.0.0.1).
struct host_port {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
};
/// Parses `text`, the value of `flag`; fails (status 2) with a message naming the flag. A port of 0 is
/// refused unless `port_zero_ok` (listening on any free port).
host_port parse_host_port(const std::string& text, const char* flag, bool port_zero_ok = false);
/// Parses a comma-separated list of HOST:PORT (e.g. the gManagers of --join and --gmanager), as parse_host_port.
std::vector<actors::control_endpoint> parse_host_port_list(const std::string& text, const char* flag);

/// Adds --tls-ca, --tls-cert, --tls-key (the control plane's security) to `cmd`, writing into `s`, and for a
/// command that `listens` on the control plane, --insecure.
void add_tls_options(CLI::App* cmd, actors::control_security& s, bool listens);
/// Checks the TLS files of `s` (fails with status 2 and the reason when one is bad), and logs with `who` whether
/// the control plane uses TLS.
void check_tls_options(const actors::control_security& s, const std::string& who);

/// Prints `message` to stderr as an error and throws CLI::RuntimeError(code).
[[noreturn]] void fail(const std::string& message, int code = 1);

/// Loads `model` (fails with its error) and logs to stderr, as `who`, what was loaded: its parameters, the bytes
/// of its weights, the time loading took, and what loading adapted.
gpu::loaded_model load_model_or_fail(const std::string& model, const gpu::load_options& options, const std::string& who);

/// Checks that an option's value is a finite number above zero ("must be a number above zero, not 0").
CLI::Validator above_zero();
/// Checks that an option's value is a finite number from `lowest` to `highest` ("must be a number from 0
/// to 1, not nan"; "0 or more" without a highest).
CLI::Validator number_from(double lowest, double highest = std::numeric_limits<double>::infinity());

/// Adds an integer option checked to lie in [lo, hi], its default shown in --help.
template <class T>
CLI::Option* add_ranged_option(CLI::App* cmd, const std::string& name, T& value, const std::string& help, T lo, T hi) {
  return cmd->add_option(name, value, help)->check(CLI::Range(lo, hi))->capture_default_str();
}

}  // namespace illm::cli
