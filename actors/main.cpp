// illm: the command line of infinite-llm.

#include <fmt/format.h>

#include "actors/cli/commands.hpp"
#include "gpu/backend_registry.hpp"
#include "gpu/cpu/blas_core.hpp"

int main(int argc, char** argv) {
  illm::gpu::cpu::restart_for_blas_core(argv);  // before any thread: OpenBLAS's kernels for this processor
  CLI::App app{"infinite-llm: LLM serving with attention and KV cache decoupled across instances"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version",
                       fmt::format("illm 0.1.0 (backends: {})", fmt::join(illm::gpu::compiled_backends(), ", ")));
  illm::cli::add_generate_command(app);
  illm::cli::add_serve_command(app);
  illm::cli::add_profile_command(app);
  illm::cli::add_perplexity_command(app);
  illm::cli::add_sim_command(app);
  illm::cli::add_bench_command(app);
  illm::cli::add_gmanager_command(app);
  illm::cli::add_instance_command(app);
  illm::cli::add_chaos_command(app);
  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) {
      fmt::print("{}", app.help());
      return 2;
    }
  } catch (const CLI::ParseError& e) {
    // Help and version exit 0; a usage error exits 2, a failed command (CLI::RuntimeError) its own code.
    const int code = app.exit(e);
    return code == 0 || dynamic_cast<const CLI::RuntimeError*>(&e) ? code : 2;
  }
  return 0;
}
