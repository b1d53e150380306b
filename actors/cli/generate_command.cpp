// `illm generate`: prompt in, continuation out, through the DistAttention path over --kv-pools pools.

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/cli/setting_flags.hpp"
#include "actors/cli/backend_flag.hpp"
#include "actors/cli/commands.hpp"
#include "actors/cli/type_flags.hpp"
#include "actors/cluster/cluster.hpp"
#include "actors/cluster/remote_cluster.hpp"
#include "actors/request.hpp"
#include "gpu/backend_registry.hpp"
#include "gpu/generate.hpp"

namespace illm::cli {

void fail(const std::string& message, int code) {
  fmt::print(stderr, "illm: error: {}\n", message);
  throw CLI::RuntimeError(code);
}

gpu::loaded_model load_model_or_fail(const std::string& model, const gpu::load_options& options, const std::string& who) {
  const auto start = std::chrono::steady_clock::now();
  auto loaded = gpu::load_model(model, options);
  if (!loaded.is_ok()) fail(loaded.error().message());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const gpu::model_weights& w = *loaded->weights;
  fmt::print(stderr, "{}: loaded {}: {:.1f}M parameters, {:.2f} GiB of weights ({}), in {:.1f} s\n", who, loaded->name,
             double(w.config().parameter_count(w.shared_classifier())) / 1e6, double(w.bytes()) / double(1u << 30),
             w.describe_types(), seconds);
  for (const std::string& note : loaded->notes) fmt::print(stderr, "{}: {}\n", who, note);
  return std::move(loaded).value();
}

namespace {

/// `text` as a finite number, or nothing.
std::optional<double> finite_number(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value)) return std::nullopt;
  return value;
}

}  // namespace

CLI::Validator above_zero() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const auto value = finite_number(text);
        return value && *value > 0 ? "" : "must be a number above zero, not " + text;
      },
      "POSITIVE");
}

CLI::Validator number_from(double lowest, double highest) {
  const std::string range = std::isinf(highest) ? fmt::format(", {} or more,", lowest)
                                                 : fmt::format(" from {} to {},", lowest, highest);
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const auto value = finite_number(text);
        return value && *value >= lowest && *value <= highest ? "" : "must be a number" + range + " not " + text;
      },
      "NUMBER");
}

namespace {

struct generate_flags {
  std::string model = "stories15M";
  std::string weight_type;
  std::string prompt;
  std::string prompt_file;
  int max_tokens = 128;
  float temperature = 1.0f;
  float top_p = 0.9f;
  int64_t seed = -1;
  bool ignore_eos = false;
  int kv_pools = 1;
  int instances = 0;  // 0: no cluster, the single-process DistAttention path over kv_pools
  /// With --instances; kv_blocks_per_instance 0: the whole request. Its threads serve one engine too.
  actors::instance_settings instance{.kv_blocks_per_instance = 0};
  actors::batch_settings batch;  ///< max_batch_tokens on one engine too; the rest with --instances
  std::string backend = "auto";
  bool json = false;
  std::string gmanager;  // HOST:PORT of a cluster of processes (illm gmanager): the request goes there
  actors::control_security security;  // how it reaches that cluster
};

std::string read_prompt(const generate_flags& f) {
  if (f.prompt_file.empty()) return f.prompt;
  std::ifstream in(f.prompt_file, std::ios::binary);
  if (!in) fail(fmt::format("cannot read prompt file {}", f.prompt_file));
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// What both paths report.
struct generation_report {
  std::vector<int32_t> prompt_ids, token_ids;
  std::string finish_reason;
  uint64_t seed = 0;
  double prefill_s = 0, decode_s = 0;
  nlohmann::json extra;  ///< path-specific fields
};

void print_report(const generate_flags& f, const gpu::loaded_model& model, const std::string& prompt,
                  const generation_report& r) {
  const std::string text = model.vocab->decode(r.token_ids, r.prompt_ids.back());
  const int n_prompt = int(r.prompt_ids.size()), n_gen = int(r.token_ids.size());
  const double prefill_tok_s = r.prefill_s > 0 ? n_prompt / r.prefill_s : 0.0;
  const double decode_tok_s = r.decode_s > 0 && n_gen > 1 ? (n_gen - 1) / r.decode_s : 0.0;
  if (f.json) {
    nlohmann::json j = r.extra;
    j["model"] = model.name;
    j["text"] = text;
    j["prompt_token_ids"] = r.prompt_ids;
    j["token_ids"] = r.token_ids;
    j["finish_reason"] = r.finish_reason;
    j["seed"] = r.seed;
    j["stats"] = {{"prompt_tokens", n_prompt},
                  {"generated_tokens", n_gen},
                  {"prefill_tok_s", prefill_tok_s},
                  {"decode_tok_s", decode_tok_s}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  std::cout << prompt << text << "\n";
  fmt::print("[prompt tokens {}, generated tokens {}, prefill {:.1f} tok/s, decode {:.1f} tok/s]\n", n_prompt, n_gen,
             prefill_tok_s, decode_tok_s);
}

generation_report run_pools(const generate_flags& f, const gpu::loaded_model& model, gpu::generate_options options) {
  auto device = gpu::make_backend(f.backend, f.instance.threads_per_instance);
  if (!device.is_ok()) fail(device.error().message());
  options.kv_pools = f.kv_pools;
  auto out = gpu::generate(model, *device.value(), options);
  if (!out.is_ok()) fail(out.error().message());
  generation_report r{options.prompt_ids, out->token_ids, gpu::to_string(out->finish), options.seed,
                      out->prefill_s, out->decode_s, {}};
  r.extra["kv_pools"] = f.kv_pools;
  r.extra["blocks_per_pool"] = out->blocks_per_pool;
  r.extra["partials_merged_per_layer"] = out->partials_per_layer;
  r.extra["attention_bytes"] = {{"queries", out->query_bytes}, {"partials", out->partial_bytes}};
  return r;
}

/// A request's tokens as they stream in, and when the first came: the callbacks to give the request,
/// then wait() for its end.
struct token_stream {
  using clock = std::chrono::steady_clock;
  std::mutex mutex;
  std::vector<int32_t> tokens;
  clock::time_point start = clock::now(), first_token{};
  std::promise<actors::request_finished> finished;

  actors::request_callbacks callbacks() {
    return {[this](int32_t token) {
              std::lock_guard lock(mutex);
              if (tokens.empty()) first_token = clock::now();
              tokens.push_back(token);
            },
            [this](const actors::request_finished& end) { finished.set_value(end); }};
  }

  /// Waits for the end; the report gets the tokens, the finish reason and the timings.
  actors::request_finished wait(generation_report& r) {
    const actors::request_finished end = finished.get_future().get();
    const auto stop = clock::now();
    std::lock_guard lock(mutex);
    r.token_ids = tokens;
    r.finish_reason = end.reason;
    if (!tokens.empty()) {
      r.prefill_s = std::chrono::duration<double>(first_token - start).count();
      r.decode_s = std::chrono::duration<double>(stop - first_token).count();
    }
    return end;
  }
};

/// Blocks the request held per instance at its end, indexed by instance id 0..count-1.
nlohmann::json blocks_per_instance(const std::vector<actors::request_placement_entry>& placement, uint32_t count) {
  std::map<uint32_t, uint32_t> blocks;
  for (const auto& e : placement) blocks[e.inst_id] += e.num_blocks;
  nlohmann::json out = nlohmann::json::array();
  for (uint32_t i = 0; i < count; ++i) out.push_back(blocks[i]);
  return out;
}

/// The request's moves in the report: those that succeeded under "moves", the others under "refusals".
void add_moves(generation_report& r, const std::vector<actors::move_report>& moves) {
  r.extra["moves"] = nlohmann::json::array();
  r.extra["refusals"] = nlohmann::json::array();
  for (const auto& m : moves) {
    nlohmann::json j = {{"move_id", m.id}, {"request", m.req_id}, {"source", m.src_inst},
                        {"destination", m.dst_inst}, {"blocks", m.blocks}, {"loan", m.self_initiated},
                        {"prefilled", m.computed}};
    if (m.ok) {
      r.extra["moves"].push_back(j);
    } else {
      j["reason"] = m.reason;
      r.extra["refusals"].push_back(j);
    }
  }
}

/// The request on an embedded cluster of --instances instances, through the actors and the protocol.
generation_report run_cluster(const generate_flags& f, const gpu::loaded_model& model,
                              const gpu::generate_options& options) {
  actors::cluster_options co;
  co.instances = f.instances;
  co.instance = f.instance;
  co.instance.backend = instance_backend(f.backend, "generate --instances");
  if (co.instance.kv_blocks_per_instance == 0)
    co.instance.kv_blocks_per_instance = gpu::blocks_for_tokens(int64_t(options.prompt_ids.size()) + options.max_tokens) + 1;
  co.batch = f.batch;
  auto started = actors::cluster::start(model.weights, co);
  if (!started.is_ok()) fail(started.error().message());
  actors::cluster& c = *started.value();

  actors::generate_params params{options.prompt_ids, options.max_tokens, options.sampling.temperature,
                                 options.sampling.top_p, options.seed, options.ignore_eos, options.stop_ids};
  token_stream stream;
  c.submit(params, stream.callbacks());
  generation_report r{options.prompt_ids, {}, {}, options.seed, 0, 0, {}};
  const actors::request_finished end = stream.wait(r);
  if (end.reason == "error") fail("the request failed: " + end.error);
  r.extra["instances"] = f.instances;
  r.extra["kv_blocks_per_instance"] = co.instance.kv_blocks_per_instance;
  r.extra["blocks_per_instance"] = blocks_per_instance(end.placement, uint32_t(f.instances));
  r.extra["replica_blocks_per_instance"] = blocks_per_instance(end.replicas, uint32_t(f.instances));
  r.extra["preemptions"] = end.preemptions;
  add_moves(r, c.moves());
  c.wait_pools_free(std::chrono::seconds(10));
  c.shutdown();
  for (const auto& inst : c.instances())
    if (!inst.accounting.is_ok() || inst.free_blocks != inst.total_blocks)
      fail(fmt::format("instance {} pool accounting after the run: {} of {} blocks free ({})", inst.id,
                       inst.free_blocks, inst.total_blocks, inst.accounting.message()));
  return r;
}

/// The request on a cluster of processes: it goes to the instance of the gManager's view with the most
/// free blocks (remote_cluster, as for illm serve --gmanager); its tokens come back over CAF's middleman.
generation_report run_on_gmanager(const generate_flags& f, const gpu::generate_options& options) {
  auto connected = actors::remote_cluster::connect(parse_host_port_list(f.gmanager, "--gmanager"), f.security);
  if (!connected.is_ok()) fail(connected.error().message());
  actors::remote_cluster& c = *connected.value();
  generation_report r{options.prompt_ids, {}, {}, options.seed, 0, 0, {}};
  const actors::cluster_view view = c.view();
  actors::generate_params params{options.prompt_ids, options.max_tokens, options.sampling.temperature,
                                 options.sampling.top_p, options.seed, options.ignore_eos, options.stop_ids};
  token_stream stream;
  const actors::request_id id = c.submit(params, stream.callbacks(), view);
  const actors::request_finished end = stream.wait(r);
  add_moves(r, c.moves_of(id));  // the reports of moves still ending may be missing
  c.shutdown();
  if (end.reason == "error") fail("the request failed: " + end.error);
  r.extra["gmanager"] = f.gmanager;
  r.extra["instances"] = view.instances.size();
  uint32_t last = 0;  // indexed by instance id, as with --instances
  for (const actors::instance_view& i : view.instances) last = std::max(last, i.inst_id);
  for (const auto& e : end.placement) last = std::max(last, e.inst_id);
  r.extra["blocks_per_instance"] = blocks_per_instance(end.placement, last + 1);
  r.extra["preemptions"] = end.preemptions;
  return r;
}

void run_generate(const generate_flags& f) {
  if (!f.prompt.empty() && !f.prompt_file.empty()) fail("give --prompt or --prompt-file, not both", 2);
  if (f.instances > 0 && f.kv_pools > 1) fail("give --instances or --kv-pools, not both", 2);
  const std::string prompt = read_prompt(f);
  const gpu::loaded_model model =
      load_model_or_fail(f.model, {.weight_type = weight_type_of(f.weight_type, "generate")}, "illm generate");

  gpu::generate_options options;
  auto prompt_ids = model.vocab->try_encode(prompt, true);
  if (!prompt_ids.is_ok()) fail("illm generate: the prompt: " + prompt_ids.error().message());
  options.prompt_ids = std::move(prompt_ids).value();
  options.max_tokens = f.max_tokens;
  options.sampling = {f.temperature, f.top_p};
  options.seed = f.seed >= 0 ? uint64_t(f.seed) : std::random_device{}();
  options.ignore_eos = f.ignore_eos;
  options.stop_ids = model.end_ids;
  options.max_batch_tokens = f.batch.max_batch_tokens;
  if (!f.gmanager.empty() && (f.instances > 0 || f.kv_pools > 1))
    fail("give --gmanager, --instances or --kv-pools, not two of them", 2);
  if (f.security.tls() && f.gmanager.empty()) fail("--tls-ca, --tls-cert, --tls-key: for a cluster of processes (--gmanager)", 2);
  if (gpu::status ok = actors::check_control_security(f.security); !ok.is_ok()) fail(ok.message(), 2);
  const generation_report r = !f.gmanager.empty() ? run_on_gmanager(f, options)
                              : f.instances > 0   ? run_cluster(f, model, options)
                                                  : run_pools(f, model, options);
  print_report(f, model, prompt, r);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto flags = std::make_shared<generate_flags>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a continuation of a prompt");
  add_model_flags(*cmd, flags->model, flags->weight_type);
  cmd->add_option("--prompt", flags->prompt, "Prompt text");
  cmd->add_option("--prompt-file", flags->prompt_file, "Read the prompt from a file");
  cmd->add_option("--max-tokens", flags->max_tokens, "Tokens to generate at most")
      ->check(CLI::Range(0, 1 << 24))
      ->capture_default_str();
  cmd->add_option("--temperature", flags->temperature, "Sampling temperature (0: greedy)")
      ->check(number_from(0, 100))
      ->capture_default_str();
  cmd->add_option("--top-p", flags->top_p, "Nucleus sampling mass")
      ->check(number_from(0, 1))
      ->capture_default_str();
  cmd->add_option("--seed", flags->seed, "Sampling seed (default: random, reported with --json)");
  cmd->add_flag("--ignore-eos", flags->ignore_eos, "Keep generating past BOS and EOS");
  cmd->add_option("--kv-pools", flags->kv_pools, "Spread the KV blocks over this many pools")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--instances", flags->instances,
                  "Run on an embedded cluster of this many instances (gManager, rManagers, actors)")
      ->check(CLI::Range(1, 64));
  add_setting_flags(cmd, actors::instance_settings_table(), flags->instance);  // pool 0: the whole request
  add_setting_flags(cmd, actors::batch_settings_table(), flags->batch);
  cmd->add_option("--backend", flags->backend, "auto (cuda when a GPU is present, else cpu), cpu, cpu-reference or cuda")->capture_default_str();
  add_devices_flag(*cmd, flags->instance.devices);
  add_kv_type_flag(*cmd, flags->instance.kv_type);
  add_prefix_cache_flag(*cmd, flags->instance.prefix_cache);
  cmd->add_flag("--json", flags->json, "Print one JSON object");
  cmd->add_option("--gmanager", flags->gmanager,
                  "HOST:PORT of a cluster of processes (illm gmanager): send the request to its instance with the "
                  "most free blocks");
  add_tls_options(cmd, flags->security, false);
  cmd->callback([flags] { run_generate(*flags); });
}

}  // namespace illm::cli
