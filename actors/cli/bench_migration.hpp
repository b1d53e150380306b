#pragma once
// `illm bench migration`: what moving KV blocks to a peer process during decode costs decode
// throughput (the paper's Fig. 12), registered under `illm bench`.

#include <CLI/CLI.hpp>

namespace illm::cli {

/// Adds `migration` to the `bench` subcommand: decode tok/s while 0, 16 and 32 tokens' worth of KV
/// per step move to a peer over UCX, side by side in one run, as a table or one JSON object.
void add_bench_migration_command(CLI::App& bench);

}  // namespace illm::cli
