// `illm serve`: the OpenAI-compatible HTTP API in front of an embedded cluster, or of a cluster of
// processes (--gmanager HOST:PORT: requests go to its joined instances), until SIGINT or SIGTERM.

#include <chrono>
#include <csignal>
#include <functional>
#include <iostream>
#include <thread>

#include <fmt/format.h>

#include "actors/cli/backend_flag.hpp"
#include "actors/cli/commands.hpp"
#include "actors/cli/type_flags.hpp"
#include "actors/cli/fault_flags.hpp"
#include "actors/cli/setting_flags.hpp"
#include "actors/cli/memory_trim.hpp"
#include "actors/cli/stop_signals.hpp"
#include "actors/frontend/serve_config.hpp"
#include "actors/frontend/service.hpp"
#include "actors/cluster/cluster.hpp"
#include "actors/placement/greedy_policy.hpp"
#include "actors/placement/profile_cache.hpp"
#include "gpu/grammar/constraint_cache.hpp"
#include "actors/placement/profiler.hpp"
#include "actors/cluster/remote_cluster.hpp"
#include "gpu/backend_registry.hpp"
#include "gpu/model_files.hpp"

namespace illm::cli {

namespace {

/// Flags given on the command line; each overrides the config file.
struct serve_flags {
  std::string config;
  std::string model, served_model_name, chat_template, weight_type, kv_type, prefix_cache, host, metrics_prefix, gmanager, policy, profile, faults, backend,
      devices;
  int port = -1, instances = 0, max_requests = 0;
  std::vector<std::string> api_keys;
  bool prefix_cache_per_key = false;
  actors::control_security tls;  // files given override the config file's
  actors::instance_settings instance;  // those given override the config file's
  actors::batch_settings batch;
  actors::gmanager_settings gmanager_settings;
};

actors::frontend::serve_config resolve(const serve_flags& f, const CLI::App* cmd) {
  actors::frontend::serve_config c;
  if (!f.config.empty()) {
    auto loaded = actors::frontend::load_serve_config(f.config);
    if (!loaded.is_ok()) fail(loaded.error().message(), 2);
    c = loaded.value();
  }
  if (!f.model.empty()) c.model = f.model;
  if (!f.served_model_name.empty()) c.served_model_name = f.served_model_name;
  if (!f.chat_template.empty()) c.chat_template = f.chat_template;
  if (!f.weight_type.empty()) c.weight_type = f.weight_type;
  if (!f.host.empty()) c.host = f.host;
  if (f.port >= 0) c.port = uint16_t(f.port);
  if (!f.gmanager.empty()) c.gmanager = f.gmanager;
  for (auto file : {&actors::control_security::ca, &actors::control_security::cert, &actors::control_security::key})
    if (!(f.tls.*file).empty()) c.tls.*file = f.tls.*file;
  if (!f.faults.empty()) c.faults = f.faults;
  if (f.instances > 0) c.instances = f.instances;
  if (!f.backend.empty()) c.instance.backend = f.backend;
  if (!f.kv_type.empty()) c.instance.kv_type = f.kv_type;
  if (!f.prefix_cache.empty()) c.instance.prefix_cache = f.prefix_cache;
  if (!f.devices.empty()) c.instance.devices = f.devices;
  copy_given_settings(cmd, actors::instance_settings_table(), f.instance, c.instance);
  copy_given_settings(cmd, actors::batch_settings_table(), f.batch, c.batch);
  copy_given_settings(cmd, actors::gmanager_settings_table(), f.gmanager_settings, c.embedded_gmanager);
  if (f.max_requests > 0) c.service.max_requests_in_flight = f.max_requests;
  if (!f.api_keys.empty()) c.service.api_keys = f.api_keys;
  if (f.prefix_cache_per_key) c.service.prefix_cache_per_key = true;
  if (!f.metrics_prefix.empty()) c.metrics_prefix = f.metrics_prefix;
  if (!f.policy.empty()) c.policy = f.policy;
  if (!f.profile.empty()) c.profile = f.profile;
  return c;
}

/// The cluster the front end routes to, and how to stop it once the front end has drained.
struct routed_cluster {
  std::unique_ptr<actors::request_router> router;
  std::function<void()> stop;
  std::string description;
  std::function<actors::faults::fault_counts()> faults_injected;  ///< none: it injects none
  std::function<bool()> gmanager_connected;  ///< whether it reaches a gManager now
};

/// The greedy policy's profile: read from `c.profile` (it must describe `model`), or measured here on the
/// instances' backend with their thread count and kept in the profile cache, so the next start on this machine
/// reads it (illm profile --out FILE, then --profile FILE, names one instead).
actors::placement::profile greedy_profile(const actors::frontend::serve_config& c, const gpu::loaded_model& model,
                                          int threads) {
  if (!c.profile.empty()) {
    auto loaded = actors::placement::profile_from_file(c.profile);
    if (!loaded.is_ok()) fail(loaded.error().message());
    if (loaded->model != model.name || loaded->n_layers != model.weights->config().n_layers)
      fail(fmt::format("{} describes {}, not {}: measure one with illm profile --model {}", c.profile,
                       loaded->model.empty() ? "an unnamed model" : loaded->model, model.name, c.model));
    return loaded.value();
  }
  auto device = gpu::make_backend(instance_backend(c.instance.backend, "serve"), threads);
  if (!device.is_ok()) fail(device.error().message());
  const std::string cache = actors::placement::profile_cache_path(
      {c.model, model.weights->describe_types(), c.instance.kv_type, device.value()->description(), threads});
  if (auto cached = actors::placement::cached_profile(cache)) {
    fmt::print("illm serve: placement profile from {} (measured at an earlier start; delete it to measure again)\n",
               cache);
    return *cached;
  }
  actors::placement::profiler_options options;
  options.kv_type = kv_type_of(c.instance.kv_type, "serve");
  options.repeats = 2;
  const auto started = std::chrono::steady_clock::now();
  auto measured = actors::placement::measure_profile(model, *device.value(), options);
  if (!measured.is_ok()) fail("measuring the placement profile: " + measured.error().message());
  const bool kept = actors::placement::store_profile(cache, measured.value());
  fmt::print("illm serve: placement profile measured in {:.1f} s ({}; {})\n",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), measured->name,
             kept ? "kept in " + cache + " for the next start" : "cannot write " + cache);
  std::fflush(stdout);
  return measured.value();
}

routed_cluster start_embedded(const actors::frontend::serve_config& c, const gpu::loaded_model& model,
                              std::shared_ptr<actors::metrics::runtime_metrics> metrics,
                              std::shared_ptr<gpu::grammar::constraint_cache> constraints) {
  actors::cluster_options co;
  co.constraints = std::move(constraints);
  co.instances = c.instances;
  co.instance = c.instance;
  co.instance.backend = instance_backend(c.instance.backend, "serve");
  co.batch = c.batch;
  co.gmanager = c.embedded_gmanager;
  co.faults = fault_plan_of(c.faults, actors::faults::fault_role::embedded);
  announce_faults(co.faults, "illm serve");
  co.metrics = std::move(metrics);
  const int threads = co.instance.threads_per_instance > 0
                          ? co.instance.threads_per_instance
                          : std::max(1, int(std::thread::hardware_concurrency()) / co.instances);
  if (c.policy == "greedy") co.policy = actors::placement::greedy_policy(greedy_profile(c, model, threads));
  auto started = actors::cluster::start(model.weights, co);
  if (!started.is_ok()) fail(started.error().message());
  actors::cluster* cl = started.value().get();
  return {std::move(started).value(),
          [cl] {
            cl->wait_pools_free(std::chrono::seconds(5));
            cl->shutdown();
          },
          fmt::format("{} instances ({} KV blocks each, {} placement)", c.instances, c.instance.kv_blocks_per_instance,
                      c.policy),
          [cl] { return cl->faults_injected(); }, [] { return true; }};  // its gManager is in this process
}

routed_cluster connect_remote(const actors::frontend::serve_config& c,
                              const std::shared_ptr<actors::metrics::runtime_metrics>& metrics) {
  auto connected = actors::remote_cluster::connect(
      parse_host_port_list(c.gmanager, "--gmanager"), c.tls,
      [](const std::string& line) {
        fmt::print("illm serve: {}\n", line);
        std::fflush(stdout);
      },
      [metrics] { metrics->cluster_peers_refused.with().add(); });
  if (!connected.is_ok()) fail(connected.error().message());
  actors::remote_cluster* rc = connected.value().get();
  return {std::move(connected).value(), [rc] { rc->shutdown(); },
          fmt::format("the cluster of processes of the gManager at {}", c.gmanager), {},
          [rc] { return rc->gmanager_linked(); }};
}

/// The share of each instance's KV blocks in use, as the gManager's view has it.
void add_kv_usage_gauge(actors::metrics::registry& registry, const std::string& prefix, actors::request_router& router) {
  registry.add_sampled_gauge(prefix + "kv_cache_usage_perc", "Fraction of an instance's KV blocks in use.", {"instance"},
                             [&router] {
                               std::vector<std::pair<actors::metrics::label_values, double>> out;
                               for (const auto& i : router.view().instances)
                                 out.push_back({{std::to_string(i.inst_id)},
                                                i.total_blocks ? 1.0 - double(i.free_blocks) / i.total_blocks : 0.0});
                               return out;
                             });
}

void run_serve(const serve_flags& flags, const CLI::App* cmd) {
  const actors::frontend::serve_config c = resolve(flags, cmd);
  if (!c.gmanager.empty()) (void)parse_host_port_list(c.gmanager, "--gmanager");  // a bad address fails before loading
  if (c.tls.tls() && c.gmanager.empty()) fail("--tls-ca, --tls-cert, --tls-key: for a cluster of processes (--gmanager)", 2);
  if (!c.gmanager.empty()) check_tls_options(c.tls, "illm serve");
  if (!c.gmanager.empty() && !c.faults.empty())
    fail("--faults: a front end of processes injects none: give --faults to illm instance", 2);
  if (!c.faults.empty()) (void)fault_plan_of(c.faults, actors::faults::fault_role::embedded);  // a bad spec fails before loading
  // Every thread started from here on leaves SIGINT and SIGTERM to this one, which waits for them.
  const sigset_t stop_signals = block_stop_signals();

  (void)kv_type_of(c.instance.kv_type, "serve");  // a bad kv_type fails before the model loads
  if (std::count(actors::prefix_cache_modes.begin(), actors::prefix_cache_modes.end(), c.instance.prefix_cache) == 0)
    fail("illm serve: prefix_cache must be off, local or cluster, not '" + c.instance.prefix_cache + "'", 2);
  const gpu::loaded_model model = load_model_or_fail(
      c.model, {.chat_template_file = c.chat_template, .weight_type = weight_type_of(c.weight_type, "serve")}, "illm serve");
  auto registry = std::make_shared<actors::metrics::registry>();
  auto metrics = std::make_shared<actors::metrics::runtime_metrics>(*registry, c.metrics_prefix);
  // Structured outputs' grammars, shared by the front end and an embedded cluster's instances.
  auto constraints =
      std::make_shared<gpu::grammar::constraint_cache>(model.vocab, actors::constraint_budget_of(c.instance));
  actors::metrics::add_constraint_cache_gauges(*registry, c.metrics_prefix, constraints);
  routed_cluster routed =
      c.gmanager.empty() ? start_embedded(c, model, metrics, constraints) : connect_remote(c, metrics);
  add_kv_usage_gauge(*registry, c.metrics_prefix, *routed.router);
  if (routed.faults_injected) add_faults_metric(*registry, c.metrics_prefix, routed.faults_injected);
  actors::metrics::add_gmanager_connected(*registry, c.metrics_prefix, routed.gmanager_connected);
  actors::frontend::service_options so = c.service;
  so.model_name = c.served_model_name.empty() ? model.name : c.served_model_name;
  so.constraints = constraints;
  so.end_ids = model.end_ids;
  so.max_model_len = model.max_model_len;
  so.limits.max_model_len = model.max_model_len;
  so.chat = model.chat;
  so.limits.default_sampling = model.defaults.over(so.limits.default_sampling);
  actors::frontend::service svc(*routed.router, model.vocab, registry, metrics, so);
  if (gpu::status s = svc.start(c.host, c.port); !s.is_ok()) fail(s.message());
  fmt::print("illm serve: {} on {} at http://{}:{}\n", model.name, routed.description, c.host, svc.port());
  std::fflush(stdout);

  const periodic_trim trim;
  const std::atomic<bool> never{false};
  const int signal = wait_for_stop_signal(stop_signals, never);
  fmt::print("illm serve: {} received: finishing {} requests (up to {} s)\n", stop_signal_name(signal),
             svc.in_flight(), c.shutdown_grace_s);
  std::fflush(stdout);
  svc.drain(std::chrono::seconds(c.shutdown_grace_s));
  routed.stop();
  fmt::print("illm serve: stopped\n");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto flags = std::make_shared<serve_flags>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve the OpenAI-compatible API from an embedded cluster or a cluster of processes");
  cmd->footer("Configuration file keys (JSON object):\n" + actors::frontend::serve_config_keys());
  cmd->add_option("--config", flags->config, "JSON configuration file (flags override it)");
  add_model_flags(*cmd, flags->model, flags->weight_type);
  cmd->add_option("--served-model-name", flags->served_model_name,
                  "The model id clients ask for (default: the model folder's or file's name)");
  cmd->add_option("--chat-template", flags->chat_template,
                  "Jinja file replacing the model's chat template (a model without one joins the messages by newlines)");
  add_kv_type_flag(*cmd, flags->kv_type);
  add_prefix_cache_flag(*cmd, flags->prefix_cache);
  cmd->add_option("--host", flags->host, "Address to listen on (default 127.0.0.1)");
  cmd->add_option("--port", flags->port, "Port (default 8000; 0: any free port)")->check(CLI::Range(0, 65535));
  cmd->add_option("--gmanager", flags->gmanager,
                  "HOST:PORT of the gManager of a cluster of processes (illm gmanager), or a comma-separated list of them: route "
                  "to its instances instead of an embedded cluster");
  cmd->add_option("--faults", flags->faults,
                  "Faults the embedded cluster injects, seeded: e.g. seed=7,send.drop=0.01,heartbeat.drop=0.1 "
                  "(docs/faults.md; default: none)");
  cmd->add_option("--instances", flags->instances, "Instances of the embedded cluster (default 2)")
      ->check(CLI::Range(1, 64));
  add_backend_flags(*cmd, flags->backend, flags->devices, "the embedded instances");
  flags->instance = actors::frontend::serve_config{}.instance;  // the defaults --help shows
  add_setting_flags(cmd, actors::instance_settings_table(), flags->instance);
  add_setting_flags(cmd, actors::batch_settings_table(), flags->batch);
  add_setting_flags(cmd, actors::gmanager_settings_table(), flags->gmanager_settings);
  cmd->add_option("--max-requests", flags->max_requests, "Requests served at once; more get 429 (default 64)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--metrics-prefix", flags->metrics_prefix,
                  "Metric name prefix: illm: (default, as vLLM's vllm:) or illm_ (promtool's linter wants no ':')")
      ->check(CLI::IsMember({"illm:", "illm_"}));
  cmd->add_option("--policy", flags->policy,
                  "The embedded gManager's placement: greedy (the performance model, default) or simple")
      ->check(CLI::IsMember({"greedy", "simple"}));
  cmd->add_option("--profile", flags->profile,
                  "Profile of the greedy policy (from illm profile --out; default: measured at the first start on this machine and kept in $ILLM_CACHE/profiles)");
  cmd->add_option("--api-key", flags->api_keys, "Accepted Bearer key (repeatable; default: none needed)");
  cmd->add_flag("--prefix-cache-per-key", flags->prefix_cache_per_key,
                "Each API key its own prefix-cache namespace: a tenant never reads another's cached blocks (nor learns "
                "from timing what their prompts start with)");
  add_tls_options(cmd, flags->tls, false);
  cmd->callback([flags, cmd] { run_serve(*flags, cmd); });
}

}  // namespace illm::cli
