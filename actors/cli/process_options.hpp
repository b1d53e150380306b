#pragma once
// What `illm gmanager` and `illm instance --join` share: their log lines, the check of an address to listen on,
// a process's /metrics endpoint, and the --config file of a command's options.

#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "actors/frontend/http_server.hpp"
#include "actors/metrics/runtime_metrics.hpp"

namespace illm::actors {
struct control_security;
}

namespace illm::cli {

/// Prints one line on stderr at once (a process's log).
template <class... Args>
void log(fmt::format_string<Args...> format, Args&&... args) {
  fmt::print(stderr, "{}\n", fmt::format(format, std::forward<Args>(args)...));
  std::fflush(stderr);
}

/// Fails (status 2) when `host` may not be listened on under `s`.
void check_listen(const actors::control_security& s, const std::string& host, const std::string& what);

/// A process's metrics: its runtime metrics on a registry, served at /metrics on --metrics-listen (no
/// metrics, and no server, without it).
struct metrics_endpoint {
  std::shared_ptr<actors::metrics::registry> registry;
  std::shared_ptr<actors::metrics::runtime_metrics> metrics;
  std::unique_ptr<actors::frontend::http_server> server;
};

/// Serves `who`'s metrics (names under `prefix`) on `listen` (HOST:PORT, port 0: any free one), logged.
metrics_endpoint start_metrics(const std::string& listen, const std::string& prefix, const std::string& who);

/// Adds --metrics-listen and --metrics-prefix to `cmd`.
void add_metrics_options(CLI::App* cmd, std::string& listen, std::string& prefix);

/// --config FILE: the command's options in a JSON object, keyed by their long names without the dashes
/// ({"join": "10.0.0.1:7000", "kv-blocks-per-instance": 4096}); flags given too override it. A key that is
/// no option of the command, or a value its option refuses, is an error naming it.
void add_config_file(CLI::App* cmd, const std::string& example);

}  // namespace illm::cli
