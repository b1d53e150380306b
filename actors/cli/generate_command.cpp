// `illm generate`: prompt in, continuation out, through the DistAttention path over --kv-pools pools.

#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/cli/commands.hpp"
#include "gpu/backend_registry.hpp"
#include "gpu/generate.hpp"

namespace illm::cli {

void fail(const std::string& message, int code) {
  fmt::print(stderr, "illm: error: {}\n", message);
  throw CLI::RuntimeError(code);
}

namespace {

struct generate_flags {
  std::string model = "stories15M";
  std::string prompt;
  std::string prompt_file;
  int max_tokens = 128;
  float temperature = 1.0f;
  float top_p = 0.9f;
  int64_t seed = -1;
  bool ignore_eos = false;
  int kv_pools = 1;
  int threads = 0;
  int max_batch_tokens = 512;
  std::string backend = "auto";
  bool json = false;
};

std::string read_prompt(const generate_flags& f) {
  if (f.prompt_file.empty()) return f.prompt;
  std::ifstream in(f.prompt_file, std::ios::binary);
  if (!in) fail(fmt::format("cannot read prompt file {}", f.prompt_file));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void run_generate(const generate_flags& f) {
  if (!f.prompt.empty() && !f.prompt_file.empty()) fail("give --prompt or --prompt-file, not both", 2);
  const std::string prompt = read_prompt(f);
  auto model = gpu::load_model(f.model);
  if (!model.is_ok()) fail(model.error().message());
  auto device = gpu::make_backend(f.backend, f.threads);
  if (!device.is_ok()) fail(device.error().message());

  gpu::generate_options options;
  options.prompt_ids = model->vocab->encode(prompt, true);
  options.max_tokens = f.max_tokens;
  options.sampling = {f.temperature, f.top_p};
  options.seed = f.seed >= 0 ? uint64_t(f.seed) : std::random_device{}();
  options.ignore_eos = f.ignore_eos;
  options.kv_pools = f.kv_pools;
  options.max_batch_tokens = f.max_batch_tokens;
  auto out = gpu::generate(model.value(), *device.value(), options);
  if (!out.is_ok()) fail(out.error().message());

  const std::string text = model->vocab->decode(out->token_ids, options.prompt_ids.back());
  const int n_prompt = int(options.prompt_ids.size()), n_gen = int(out->token_ids.size());
  const double prefill_tok_s = out->prefill_s > 0 ? n_prompt / out->prefill_s : 0.0;
  const double decode_tok_s = out->decode_s > 0 && n_gen > 1 ? (n_gen - 1) / out->decode_s : 0.0;
  if (f.json) {
    nlohmann::json j;
    j["model"] = model->name;
    j["text"] = text;
    j["prompt_token_ids"] = options.prompt_ids;
    j["token_ids"] = out->token_ids;
    j["finish_reason"] = gpu::to_string(out->finish);
    j["seed"] = options.seed;
    j["kv_pools"] = f.kv_pools;
    j["blocks_per_pool"] = out->blocks_per_pool;
    j["partials_merged_per_layer"] = out->partials_per_layer;
    j["attention_bytes"] = {{"queries", out->query_bytes}, {"partials", out->partial_bytes}};
    j["stats"] = {{"prompt_tokens", n_prompt},
                  {"generated_tokens", n_gen},
                  {"prefill_tok_s", prefill_tok_s},
                  {"decode_tok_s", decode_tok_s}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  std::cout << prompt << text << "\n";
  fmt::print("[prompt tokens {}, generated tokens {}, prefill {:.1f} tok/s, decode {:.1f} tok/s, kv pools {}]\n",
             n_prompt, n_gen, prefill_tok_s, decode_tok_s, f.kv_pools);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto flags = std::make_shared<generate_flags>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a continuation of a prompt");
  cmd->add_option("--model", flags->model, "Model name (in $ILLM_MODELS) or path")->capture_default_str();
  cmd->add_option("--prompt", flags->prompt, "Prompt text");
  cmd->add_option("--prompt-file", flags->prompt_file, "Read the prompt from a file");
  cmd->add_option("--max-tokens", flags->max_tokens, "Tokens to generate at most")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--temperature", flags->temperature, "Sampling temperature (0: greedy)")
      ->check(CLI::Range(0.0f, 100.0f))
      ->capture_default_str();
  cmd->add_option("--top-p", flags->top_p, "Nucleus sampling mass")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_option("--seed", flags->seed, "Sampling seed (default: random, reported with --json)");
  cmd->add_flag("--ignore-eos", flags->ignore_eos, "Keep generating past BOS and EOS");
  cmd->add_option("--kv-pools", flags->kv_pools, "Spread the KV blocks over this many pools")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--threads", flags->threads, "CPU threads (0: all cores)")->check(CLI::Range(0, 1024));
  cmd->add_option("--max-batch-tokens", flags->max_batch_tokens, "Tokens per step (prefill chunk)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--backend", flags->backend, "cpu, cpu-reference or auto")->capture_default_str();
  cmd->add_flag("--json", flags->json, "Print one JSON object");
  cmd->callback([flags] { run_generate(*flags); });
}

}  // namespace illm::cli
