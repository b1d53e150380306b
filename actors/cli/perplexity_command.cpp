// `illm perplexity`: a model's perplexity on a text file, measured as llama.cpp's llama-perplexity does (chunks of
// --ctx tokens, the second half of each scored), with a progress bar, or one JSON object with --json.

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/cli/commands.hpp"
#include "actors/cli/type_flags.hpp"
#include "gpu/backend_registry.hpp"
#include "gpu/perplexity.hpp"

namespace illm::cli {

namespace {

struct perplexity_flags {
  std::string model = "stories15M";
  std::string file;
  std::string weight_type;
  std::string kv_type = "f32";
  std::string backend = "cpu";
  int threads = 2;
  int ctx = 512;
  int chunks = 0;
  bool json = false;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("illm perplexity: cannot read " + path, 2);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

/// "[#####.....] 5/10 chunks, perplexity 7.1234" on one terminal line.
void show_progress(int done, int all, double so_far) {
  const int width = 30, filled = all > 0 ? done * width / all : width;
  fmt::print(stderr, "\r[{}{}] {}/{} chunks, perplexity {:.4f}", std::string(size_t(filled), '#'),
             std::string(size_t(width - filled), '.'), done, all, so_far);
  if (done == all) fmt::print(stderr, "\n");
  std::fflush(stderr);
}

void run_perplexity(const perplexity_flags& f) {
  const std::string text = read_file(f.file);
  const gpu::loaded_model model =
      load_model_or_fail(f.model, {.weight_type = weight_type_of(f.weight_type, "perplexity")}, "illm perplexity");
  auto device = gpu::make_backend(f.backend, f.threads);
  if (!device.is_ok()) fail(device.error().message());
  gpu::perplexity_options options;
  options.n_ctx = f.ctx;
  options.max_chunks = f.chunks;
  options.kv_type = kv_type_of(f.kv_type, "perplexity");
  if (!f.json && isatty(STDERR_FILENO)) options.progress = show_progress;
  auto measured = gpu::perplexity(model, *device.value(), text, options);
  if (!measured.is_ok()) fail(measured.error().message());
  const gpu::perplexity_result& r = measured.value();
  const gpu::model_weights& w = *model.weights;
  if (f.json) {
    const nlohmann::json out = {{"model", model.name},         {"weights", w.describe_types()},
                                {"kv_type", f.kv_type},        {"perplexity", r.perplexity},
                                {"mean_nll", r.mean_nll},      {"chunks", r.chunks},
                                {"n_ctx", r.n_ctx},            {"text_tokens", r.text_tokens},
                                {"scored_tokens", r.scored_tokens}, {"running", r.running},
                                {"seconds", r.seconds}};
    std::cout << out.dump() << "\n";
    return;
  }
  fmt::print("illm perplexity: {} ({}), {} KV, {} chunks of {} tokens ({} of the text's {} scored), {:.1f} s\n",
             model.name, w.describe_types(), f.kv_type, r.chunks, r.n_ctx, r.scored_tokens, r.text_tokens, r.seconds);
  fmt::print("perplexity: {:.4f}\n", r.perplexity);
}

}  // namespace

void add_perplexity_command(CLI::App& app) {
  auto flags = std::make_shared<perplexity_flags>();
  CLI::App* cmd = app.add_subcommand("perplexity", "Measure a model's perplexity on a text file (as llama-perplexity)");
  add_model_flags(*cmd, flags->model, flags->weight_type);
  cmd->add_option("--file", flags->file, "The text to score")->required();
  add_kv_type_flag(*cmd, flags->kv_type);
  cmd->add_option("--backend", flags->backend, "cpu, cpu-reference or cuda")->capture_default_str();
  cmd->add_option("--threads", flags->threads, "CPU threads")->check(CLI::Range(1, 1024))->capture_default_str();
  cmd->add_option("--ctx", flags->ctx, "Tokens per chunk (the second half of each is scored)")
      ->check(CLI::Range(16, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--chunks", flags->chunks, "Chunks at most (0: all the text holds)")->check(CLI::Range(0, 1 << 20));
  cmd->add_flag("--json", flags->json, "Print one JSON object (perplexity, chunks, tokens, the running values)");
  cmd->callback([flags] { run_perplexity(*flags); });
}

}  // namespace illm::cli
