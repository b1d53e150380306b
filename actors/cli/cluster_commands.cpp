// `illm gmanager` and `illm instance --join`: the cluster as separate processes. The gManager is published
// on a TCP port by CAF's io middleman; each instance process builds one instance (as the embedded cluster
// builds each of its own) on a UCX data plane, reaches the gManager with remote_actor and joins it with the
// ordinary join message, so that its heartbeats, and the gManager's monitor on its rManager, cross the
// network. Membership changes are logged one line each on stderr.
//
// Data planes: each instance sends its UCX worker address with its join; the gManager's view carries it, and
// each rManager connects its plane to every peer of the view it is not connected to yet (peer id = instance
// id), so KV moves and remote attention cross processes. A peer whose endpoint fails is logged and treated
// as a failed destination (its moves fail).

#include <atomic>
#include <csignal>
#include <ctime>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>

#include "actors/cli/commands.hpp"
#include "actors/cli/setting_flags.hpp"
#include "actors/cli/stop_signals.hpp"
#include "actors/cluster/remote.hpp"
#include "actors/frontend/http_server.hpp"
#include "actors/gmanager.hpp"
#include "actors/messages.hpp"
#include "actors/metrics/runtime_metrics.hpp"
#include "actors/placement/greedy_policy.hpp"
#include "actors/placement/simple_policy.hpp"
#include "gpu/model_files.hpp"
#include "transport/registry.hpp"

namespace illm::cli {

namespace {

template <class... Args>
void log(fmt::format_string<Args...> format, Args&&... args) {
  fmt::print(stderr, "{}\n", fmt::format(format, std::forward<Args>(args)...));
  std::fflush(stderr);
}

std::unique_ptr<caf::actor_system_config> networked_config() {
  auto cfg = std::make_unique<caf::actor_system_config>();
  actors::register_messages(*cfg);
  actors::quiet_idle_scheduler(*cfg);
  cfg->load<caf::io::middleman>();
  return cfg;
}

// ---- /metrics of a gManager or instance process ----------------------------------------------------------

/// A process's metrics: its runtime metrics on a registry, served at /metrics on --metrics-listen (no
/// metrics, and no server, without it).
struct metrics_endpoint {
  std::shared_ptr<actors::metrics::registry> registry;
  std::shared_ptr<actors::metrics::runtime_metrics> metrics;
  std::unique_ptr<actors::frontend::http_server> server;
};

/// Serves `who`'s metrics (names under `prefix`) on `listen` (HOST:PORT, port 0: any free one), logged.
metrics_endpoint start_metrics(const std::string& listen, const std::string& prefix, const std::string& who) {
  metrics_endpoint out;
  if (listen.empty()) return out;
  const host_port at = parse_host_port(listen, "--metrics-listen", true);
  out.registry = std::make_shared<actors::metrics::registry>();
  out.metrics = std::make_shared<actors::metrics::runtime_metrics>(*out.registry, prefix);
  out.server = std::make_unique<actors::frontend::http_server>();
  out.server->route("/metrics", [registry = out.registry](const actors::frontend::http_request&,
                                                          actors::frontend::http_reply& reply) {
    reply.send(200, "text/plain; version=0.0.4; charset=utf-8", registry->expose());
  });
  if (gpu::status s = out.server->start(at.host, at.port, 2, 4096); !s.is_ok())
    fail(fmt::format("--metrics-listen {}: {}", listen, s.message()), 2);
  log("{}: metrics on http://{}:{}/metrics", who, at.host, out.server->port());
  return out;
}

/// Adds --metrics-listen and --metrics-prefix to `cmd`.
void add_metrics_options(CLI::App* cmd, std::string& listen, std::string& prefix) {
  cmd->add_option("--metrics-listen", listen,
                  "HOST:PORT to serve Prometheus metrics on, at /metrics (port 0: any free one; default: none)");
  cmd->add_option("--metrics-prefix", prefix, "Metric name prefix: illm: (default) or illm_")
      ->check(CLI::IsMember({"illm:", "illm_"}));
}

// ---- illm gmanager ---------------------------------------------------------------------------------------

struct gmanager_flags {
  std::string listen;
  std::string metrics_listen, metrics_prefix = "illm:";
  std::string profile;  // the greedy policy's; empty: the simple policy
  actors::gmanager_settings gmanager;
};

std::string ids(const std::vector<actors::request_id>& v) {
  return fmt::format("[{}]", fmt::join(v, ", "));
}

void run_gmanager(const gmanager_flags& flags) {
  if (flags.listen.empty()) fail("--listen is required (as a flag or in --config)", 2);
  const host_port at = parse_host_port(flags.listen, "--listen", true);
  const sigset_t stop_signals = block_stop_signals();
  auto cfg = networked_config();
  caf::actor_system sys{*cfg};

  metrics_endpoint endpoint = start_metrics(flags.metrics_listen, flags.metrics_prefix, "illm gmanager");
  auto members = std::make_shared<std::atomic<int>>(0);
  actors::gmanager_config g;
  g.metrics = endpoint.metrics;
  g.policy_period = std::chrono::milliseconds(flags.gmanager.policy_period_ms);
  g.heartbeat_timeout = std::chrono::milliseconds(flags.gmanager.heartbeat_timeout_ms);
  std::string placement = "simple";
  g.policy = actors::placement::policy(actors::placement::simple_policy);
  if (!flags.profile.empty()) {
    auto loaded = actors::placement::profile_from_file(flags.profile);
    if (!loaded.is_ok()) fail(loaded.error().message(), 2);
    placement = fmt::format("greedy on {}", loaded->name);
    g.policy = actors::placement::greedy_policy(std::move(loaded).value());
  }
  g.on_membership = [members](const actors::membership_event& e) {
    using kind = actors::membership_event::kind;
    if (e.what == kind::joined) ++*members;
    if (e.what == kind::left || e.what == kind::down) --*members;
    if (e.what == kind::down)
      log("illm gmanager: instance {} down ({}): lost {} requests it owned {}, and hosted blocks of {} requests {} "
          "(members: {})",
          e.inst_id, e.reason, e.lost_requests.size(), ids(e.lost_requests), e.lost_hosted.size(), ids(e.lost_hosted),
          members->load());
    else
      log("illm gmanager: instance {} {} (members: {})", e.inst_id, actors::to_string(e.what), members->load());
  };
  g.on_move = [](const actors::move_report& r) {
    if (r.ok)
      log("illm gmanager: move {} of request {}: instance {} -> {}, {} blocks ({})", r.id, r.req_id, r.src_inst,
          r.dst_inst, r.blocks,
          r.computed         ? "prefilled there"
          : r.self_initiated ? "loan"
                             : "order");
    else
      log("illm gmanager: move {} of request {}: instance {} -> {} failed: {}", r.id, r.req_id, r.src_inst, r.dst_inst,
          r.reason);
  };
  actors::gmanager_actor gm = actors::spawn_gmanager(sys, g);
  auto port = sys.middleman().publish(gm, at.port, at.host.c_str(), true);
  if (!port) {
    caf::anon_send_exit(gm, caf::exit_reason::user_shutdown);
    const std::string why = sys.render(port.error());
    gm = actors::gmanager_actor{};
    sys.await_all_actors_done();
    fail(fmt::format("cannot listen on {}:{}: {}", at.host, at.port, why));
  }
  log("illm gmanager: listening on {}:{} ({} placement every {} ms, heartbeat timeout {} ms)", at.host, *port,
      placement, flags.gmanager.policy_period_ms, flags.gmanager.heartbeat_timeout_ms);

  std::atomic<bool> never{false};
  const int signal = wait_for_stop_signal(stop_signals, never);
  log("illm gmanager: {} received: stopping ({} members)", stop_signal_name(signal), members->load());
  sys.middleman().unpublish(gm, *port);
  caf::anon_send_exit(gm, caf::exit_reason::user_shutdown);
  gm = actors::gmanager_actor{};
  sys.await_all_actors_done();
  log("illm gmanager: stopped");
}

// ---- illm instance --join --------------------------------------------------------------------------------

struct instance_flags {
  std::string join;
  std::string metrics_listen, metrics_prefix = "illm:";
  int id = 0;
  std::string model = "stories15M";
  std::string ucx_tls = "tcp";
  std::string ucx_net_devices = "lo";
  int drain_timeout_s = 30;
  actors::instance_settings instance;
  actors::batch_settings batch;
  std::string node;  // the node it runs on; empty: this host's name
};

/// This host's name, the node an instance runs on unless told.
std::string host_name() {
  char name[256] = {};
  return gethostname(name, sizeof(name) - 1) == 0 ? std::string(name) : std::string("localhost");
}

/// What the watcher of the gManager saw.
struct gmanager_watch {
  std::atomic<bool> gone{false};
  std::mutex mutex;
  std::string reason;
};

/// Where the plane's peer errors go: logged, and told to the instance once it exists.
struct peer_error_sink {
  std::mutex mutex;
  actors::instance_node* node = nullptr;
};

/// The instance's data plane: UCX, with its progress thread running; `o` gets its address and connector.
std::shared_ptr<transport::data_plane> make_plane(const instance_flags& flags, size_t& address_bytes,
                                                  actors::instance_node_options& o,
                                                  const std::shared_ptr<peer_error_sink>& sink) {
  auto made = transport::make_plane(
      "ucx", {.self = transport::peer_id(flags.id), .tls = flags.ucx_tls, .net_devices = flags.ucx_net_devices});
  if (!made.is_ok()) fail("the UCX data plane: " + made.error().message);
  std::shared_ptr<transport::data_plane> plane = std::move(made).value();
  const int me = flags.id;
  plane->on_peer_error([sink, me](transport::peer_id peer, transport::status why) {
    log("illm instance {}: data plane peer {} failed: {}", me, peer, why.message);
    std::lock_guard lock(sink->mutex);
    if (sink->node) sink->node->peer_failed(actors::instance_id(peer), why.message);
  });
  if (auto s = plane->start_progress_thread(); !s.is_ok()) fail("the UCX data plane: " + s.message);
  o.plane_address = plane->address();
  address_bytes = o.plane_address.size();
  std::weak_ptr<transport::data_plane> weak = plane;
  o.connect_peer = [weak](actors::instance_id peer, const std::vector<uint8_t>& address) -> std::string {
    auto p = weak.lock();
    if (!p) return "the plane is gone";
    (void)p->disconnect(transport::peer_id(peer));  // a peer at a new address (restarted), or one that failed
    auto s = p->connect(transport::peer_id(peer), address);
    return s.is_ok() ? std::string{} : s.message;
  };
  o.log = [](const std::string& line) { log("illm instance: {}", line); };
  return plane;
}

/// What this instance's data plane carried: KV blocks it put into peers' pools, remote attention messages.
void log_traffic(const std::string& me, const transport::traffic& t) {
  using transport::channel;
  log("{}: data plane traffic: {} bytes put (KV blocks sent), {} bytes of attend and {} bytes of partials messages "
      "({} messages)",
      me, t.put_bytes, t.message_bytes[int(channel::attend)], t.message_bytes[int(channel::partials)], t.messages);
}

/// Why `id` cannot join: the gManager's view has an instance with it already (empty: it can).
std::string id_in_use(caf::actor_system& sys, const actors::gmanager_actor& gm, actors::instance_id id) {
  std::string why;
  caf::scoped_actor s{sys, true};
  s->request(gm, std::chrono::seconds(5), actors::view_atom::value)
      .receive(
          [&](const actors::cluster_view& v) {
            for (const auto& x : v.instances)
              if (x.inst_id == id)
                why = fmt::format("instance id {} is already in the cluster: give each instance its own --id", id);
          },
          [&](const caf::error& e) { why = "the gManager did not answer: " + sys.render(e); });
  return why;
}

/// An instance process while it runs: what its steps below share.
struct instance_run {
  const instance_flags& flags;
  std::string me;  ///< "illm instance N", for its log lines
  caf::actor_system& sys;
  actors::gmanager_actor gm;
  std::shared_ptr<gmanager_watch> watch = std::make_shared<gmanager_watch>();
  std::shared_ptr<peer_error_sink> sink = std::make_shared<peer_error_sink>();
  caf::actor watcher;         ///< monitors the gManager and marks it gone
  metrics_endpoint endpoint;  ///< its metrics' registry and server (they outlive the node, which reports there)
  std::unique_ptr<actors::instance_node> node;
};

/// Spawns the actor that marks the gManager gone when its process ends or the link breaks.
void watch_gmanager(instance_run& r) {
  r.watcher = r.sys.spawn([watch = r.watch, gm = r.gm](caf::event_based_actor* self) -> caf::behavior {
    self->monitor(gm);
    self->set_down_handler([watch, self](caf::down_msg& d) {
      {
        std::lock_guard lock(watch->mutex);
        watch->reason = self->system().render(d.reason);
      }
      watch->gone = true;
    });
    return {[](int32_t) {}};  // it only watches
  });
}

/// Stops this instance's actors and waits (bounded) until each is down. Not await_all_actors_done: after a
/// session with a remote gManager, CAF 0.17 keeps one actor of its own counted as running (not ours: each of
/// ours is down), which would hang it, and the actor system's destructor, for ever.
void stop_all(instance_run& r) {
  std::vector<caf::actor_addr> mine;
  if (r.node) mine = r.node->actors();
  mine.push_back(r.watcher.address());
  caf::scoped_actor waiter{r.sys, true};
  for (const caf::actor_addr& a : mine) waiter->monitor(a);
  if (r.node) r.node->stop();
  {
    std::lock_guard lock(r.sink->mutex);
    r.sink->node = nullptr;
  }
  caf::anon_send_exit(r.watcher, caf::exit_reason::user_shutdown);
  r.watcher = caf::actor{};
  size_t down = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (down < mine.size() && std::chrono::steady_clock::now() < deadline)
    waiter->receive([&](const caf::down_msg&) { ++down; }, caf::after(std::chrono::milliseconds(100)) >> [] {});
  if (down < mine.size())
    log("{}: {} of its actors still running after 10 s: not waiting for them", r.me, mine.size() - down);
  r.sys.await_actors_before_shutdown(false);
}

/// Stops everything and exits with `message`.
[[noreturn]] void stop_and_fail(instance_run& r, const std::string& message, int code = 1) {
  stop_all(r);
  fail(message, code);
}

/// Waits until the gManager's view lists this instance with its instance actor (or the gManager is gone).
bool wait_joined(instance_run& r) {
  caf::scoped_actor s{r.sys, true};  // hidden: await_all_actors_done does not wait for it
  for (int i = 0; i < 100 && !r.watch->gone; ++i) {
    bool joined = false;
    s->request(r.gm, std::chrono::seconds(2), actors::view_atom::value)
        .receive(
            [&](actors::cluster_view& v) {
              for (const auto& x : v.instances)
                if (x.inst_id == r.node->id() && x.instance == r.node->instance()) {
                  joined = true;
                  log("{}: joined ({} instances in the cluster)", r.me, v.instances.size());
                }
            },
            [&](const caf::error&) {});
    if (joined) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

/// On a stop signal: the gManager stops lending to it and routing to it; waits (up to --drain-timeout-s)
/// until it serves and hosts nothing, then leaves the cluster. False when it could not leave.
bool drain_and_leave(instance_run& r) {
  caf::scoped_actor s{r.sys, true};
  s->send(r.gm, actors::drain_instance{r.node->id()});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(r.flags.drain_timeout_s);
  bool idle = false;
  while (!idle && !r.watch->gone && std::chrono::steady_clock::now() < deadline) {
    s->request(r.node->rmanager(), std::chrono::seconds(2), caf::get_atom::value)
        .receive(
            [&](const actors::instance_stats& st) {
              idle = st.batch_size == 0 && st.waiting == 0 && st.hosted_blocks == 0 && st.borrowed_blocks == 0;
            },
            [&](const caf::error&) {});
    if (!idle) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!idle) log("{}: not idle after {} s: leaving anyway", r.me, r.flags.drain_timeout_s);
  log_traffic(r.me, r.node->plane().counters());
  bool left = false;
  if (!r.watch->gone)
    s->request(r.gm, std::chrono::seconds(5), actors::leave_cluster{r.node->id()})
        .receive([&] { left = true; }, [&](const caf::error& e) { log("{}: leave: {}", r.me, r.sys.render(e)); });
  return left;
}

/// Starts this instance's node in `r` (its plane made first, its options from the flags).
void start_node(instance_run& r, const gpu::loaded_model& model) {
  actors::instance_node_options o;
  size_t address_bytes = 0;
  std::shared_ptr<transport::data_plane> plane = make_plane(r.flags, address_bytes, o, r.sink);
  o.id = actors::instance_id(r.flags.id);
  o.node = r.flags.node.empty() ? host_name() : r.flags.node;
  if (const std::string taken = id_in_use(r.sys, r.gm, o.id); !taken.empty())
    stop_and_fail(r, fmt::format("{}: {}", r.me, taken), 2);
  r.endpoint = start_metrics(r.flags.metrics_listen, r.flags.metrics_prefix, r.me);
  o.metrics = r.endpoint.metrics;
  o.instance = r.flags.instance;
  o.batch = r.flags.batch;
  auto started = actors::instance_node::start(r.sys, model.weights, o, plane, r.gm);
  if (!started.is_ok()) stop_and_fail(r, started.error().message());
  r.node = std::move(started).value();
  {
    std::lock_guard lock(r.sink->mutex);
    r.sink->node = r.node.get();
  }
  log("{}: joining the gManager ({} ({}), {} KV blocks of {} bytes, UCX plane over {} on {}, worker address {} "
      "bytes)",
      r.me, model.name, r.flags.model, r.flags.instance.kv_blocks_per_instance, r.node->pool().layout().block_bytes(),
      r.flags.ucx_tls, r.flags.ucx_net_devices, address_bytes);
}

void run_instance(const instance_flags& flags) {
  if (flags.join.empty()) fail("--join is required (as a flag or in --config)", 2);
  const host_port gm_at = parse_host_port(flags.join, "--join");
  const sigset_t stop_signals = block_stop_signals();
  auto model = gpu::load_model(flags.model);
  if (!model.is_ok()) fail(model.error().message());

  auto cfg = networked_config();
  caf::actor_system sys{*cfg};
  auto gm = sys.middleman().remote_actor<actors::gmanager_actor>(gm_at.host, gm_at.port);
  if (!gm) fail(fmt::format("cannot reach the gManager at {}:{}: {}", gm_at.host, gm_at.port, sys.render(gm.error())));
  instance_run r{flags, fmt::format("illm instance {}", flags.id), sys, *gm};
  watch_gmanager(r);
  start_node(r, model.value());
  if (!wait_joined(r) && !r.watch->gone)
    stop_and_fail(r, fmt::format("{}: the gManager did not list this instance (another instance with id {} may "
                                 "have joined meanwhile)",
                                 r.me, flags.id));

  const int signal = wait_for_stop_signal(stop_signals, r.watch->gone);
  if (signal == 0) {
    std::string why;
    {
      std::lock_guard lock(r.watch->mutex);
      why = r.watch->reason;
    }
    stop_and_fail(r, fmt::format("{}: the gManager is gone ({}): stopping", r.me, why), 3);
  }
  log("{}: {} received: draining", r.me, stop_signal_name(signal));
  const bool left = drain_and_leave(r);
  stop_all(r);
  if (!left) fail(fmt::format("{}: could not leave the cluster (the gManager is gone)", r.me), 3);
  log("{}: left the cluster", r.me);
}

}  // namespace

/// --config FILE: the command's options in a JSON object, keyed by their long names without the dashes
/// ({"join": "10.0.0.1:7000", "kv-blocks-per-instance": 4096}); flags given too override it. A key that is
/// no option of the command, or a value its option refuses, is an error naming it.
void add_config_file(CLI::App* cmd, const std::string& example) {
  auto path = std::make_shared<std::string>();
  cmd->add_option("--config", *path, "JSON file of this command's options, e.g. " + example);
  cmd->parse_complete_callback([cmd, path] {
    if (path->empty()) return;
    std::ifstream in(*path);
    if (!in) fail(fmt::format("--config {}: cannot read it", *path), 2);
    nlohmann::json config;
    try {
      config = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      fail(fmt::format("--config {}: not JSON: {}", *path, e.what()), 2);
    }
    if (!config.is_object()) fail(fmt::format("--config {}: expected a JSON object of options", *path), 2);
    for (const auto& [key, value] : config.items()) {
      CLI::Option* opt = key == "config" ? nullptr : cmd->get_option_no_throw("--" + key);
      if (!opt) fail(fmt::format("--config {}: \"{}\" is no option of illm {}", *path, key, cmd->get_name()), 2);
      if (opt->count() > 0) continue;  // given as a flag
      if (!value.is_string() && !value.is_number())
        fail(fmt::format("--config {}: \"{}\": expected a string or a number", *path, key), 2);
      try {
        opt->add_result(value.is_string() ? value.get<std::string>() : value.dump());
        opt->run_callback();
      } catch (const CLI::Error& e) {
        fail(fmt::format("--config {}: \"{}\": {}", *path, key, e.what()), 2);
      }
    }
  });
}

host_port parse_host_port(const std::string& text, const char* flag, bool port_zero_ok) {
  host_port out;
  std::string port = text;
  if (const auto colon = text.rfind(':'); colon != std::string::npos) {
    if (colon > 0) out.host = text.substr(0, colon);
    port = text.substr(colon + 1);
  }
  try {
    size_t used = 0;
    const long p = std::stol(port, &used);
    if (used != port.size() || p < (port_zero_ok ? 0 : 1) || p > 65535) throw std::out_of_range(port);
    out.port = uint16_t(p);
  } catch (const std::exception&) {
    fail(fmt::format("{} {}: expected HOST:PORT with a port in {}..65535", flag, text, port_zero_ok ? 0 : 1), 2);
  }
  return out;
}

void add_cluster_commands(CLI::App& app) {
  auto g = std::make_shared<gmanager_flags>();
  CLI::App* gcmd =
      app.add_subcommand("gmanager", "Run the gManager of a cluster of processes, published on a TCP port");
  gcmd->add_option(
      "--listen", g->listen,
      "HOST:PORT to listen on (HOST defaults to 127.0.0.1; port 0: any free; required, here or in --config)");
  add_setting_flags(gcmd, actors::gmanager_settings_table(), g->gmanager);
  gcmd->add_option(
      "--profile", g->profile,
      "Profile of the instances (illm profile --out on their host): the greedy placement policy runs on it "
      "(default: the simple policy)");
  add_metrics_options(gcmd, g->metrics_listen, g->metrics_prefix);
  add_config_file(gcmd, R"({"listen": "0.0.0.0:7000", "heartbeat-timeout-ms": 2000})");
  gcmd->callback([g] { run_gmanager(*g); });

  auto f = std::make_shared<instance_flags>();
  CLI::App* icmd = app.add_subcommand("instance", "Run one instance that joins a gManager (illm gmanager)");
  icmd->add_option("--join", f->join, "The gManager's HOST:PORT (required, here or in --config)");
  icmd->add_option("--id", f->id, "This instance's id, unique in the cluster (default 0)")->check(CLI::Range(0, 4095));
  icmd->add_option("--model", f->model, "Model name (in $ILLM_MODELS) or path (default stories15M)");
  icmd->add_option("--ucx-tls", f->ucx_tls, "UCX_TLS of the data plane (default tcp)");
  icmd->add_option("--ucx-net-devices", f->ucx_net_devices, "UCX_NET_DEVICES of the data plane (default lo)");
  icmd->add_option("--drain-timeout-s", f->drain_timeout_s, "On SIGTERM, how long to wait to be idle (default 30)")
      ->check(CLI::Range(0, 3600));
  icmd->add_option("--node", f->node,
                   "The node (host) this instance runs on (default: the host name): a long step's queries to "
                   "several holders on another node go there once, through one of them");
  add_setting_flags(icmd, actors::instance_settings_table(), f->instance);
  add_setting_flags(icmd, actors::batch_settings_table(), f->batch);
  add_metrics_options(icmd, f->metrics_listen, f->metrics_prefix);
  add_config_file(icmd,
                  R"({"join": "10.0.0.1:7000", "id": 3, "kv-blocks-per-instance": 4096, "ucx-net-devices": "eth0"})");
  icmd->callback([f] { run_instance(*f); });
}

}  // namespace illm::cli
