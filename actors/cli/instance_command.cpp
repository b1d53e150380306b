// `illm instance --join`: one instance of a cluster of processes. It builds one instance (as the embedded
// cluster builds each of its own) on a UCX data plane, reaches a gManager of its --join list (gmanager_link) and
// joins it with the ordinary join message, so that its heartbeats, and the gManager's monitor on its rManager,
// cross the network. It listens on its own control port too (carried in the view), and the other processes link
// to it directly (control_links): no message between instances or from a front end passes through the
// gManager's process. The gManager is soft state: when it is gone the instance serves on from its last view
// and its link reaches a gManager again, which it then joins.
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

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <nlohmann/json.hpp>

#include "gpu/grammar/constraint_cache.hpp"
#include "actors/cli/backend_flag.hpp"
#include "actors/cli/commands.hpp"
#include "actors/cli/type_flags.hpp"
#include "actors/cli/fault_flags.hpp"
#include "actors/cli/setting_flags.hpp"
#include "actors/cli/memory_trim.hpp"
#include "actors/cli/stop_signals.hpp"
#include "actors/cluster/control_links.hpp"
#include "actors/cluster/control_security.hpp"
#include "actors/cluster/gmanager_link.hpp"
#include "actors/cluster/remote.hpp"
#include "actors/frontend/http_server.hpp"
#include "actors/gmanager.hpp"
#include "actors/messages.hpp"
#include "actors/metrics/runtime_metrics.hpp"
#include "actors/placement/greedy_policy.hpp"
#include "actors/placement/simple_policy.hpp"
#include "gpu/model_files.hpp"
#include "transport/registry.hpp"
#include "actors/cli/process_options.hpp"

namespace illm::cli {

namespace {

struct instance_flags {
  std::string join;
  std::string weight_type;
  actors::control_security security;
  std::string listen;  // its control port, HOST:PORT; empty: a free port on the address that reaches the gManager
  std::string faults;  // the fault plan it injects (actors/faults/fault_plan.hpp); empty: none
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

/// The gManager this instance reports to, as its link follows it (set on the link's thread).
struct gmanager_seen {
  std::mutex mutex;
  actors::gmanager_actor gmanager;  ///< the one linked now; none: none is reachable
  std::string last_error;           ///< why the last round reached none
  actors::rmanager_actor rmanager;  ///< told of every gManager linked once the node runs
};

/// Where the plane's peer errors go: logged, and told to the instance once it exists.
struct peer_error_sink {
  std::mutex mutex;
  actors::instance_node* node = nullptr;
};

/// The instance's data plane: UCX (inside faulty:ucx when `plan` asks for data-plane faults), with its progress
/// thread running; `o` gets its address and connector.
std::shared_ptr<transport::data_plane> make_plane(const instance_flags& flags, const actors::faults::fault_plan& plan,
                                                  size_t& address_bytes,
                                                  actors::instance_node_options& o,
                                                  const std::shared_ptr<peer_error_sink>& sink) {
  auto made = transport::make_plane(plan.data_faults ? "faulty:ucx" : "ucx",
                                    {.self = transport::peer_id(flags.id), .tls = flags.ucx_tls,
                                     .net_devices = flags.ucx_net_devices, .faults = plan.data_text});
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

/// Why instance `id` with KV of identity `kv` cannot join: the gManager's view has an instance with that id
/// already, or members whose KV is of another model or type (empty: it can).
std::string why_not_join(caf::actor_system& sys, const actors::gmanager_actor& gm, actors::instance_id id,
                         const gpu::kv_identity& kv) {
  std::string why;
  caf::scoped_actor s{sys, true};
  s->request(gm, std::chrono::seconds(5), actors::view_atom::value)
      .receive(
          [&](const actors::cluster_view& v) {
            for (const auto& x : v.instances) {
              if (x.inst_id == id)
                why = fmt::format("instance id {} is already in the cluster: give each instance its own --id", id);
              else if (std::string other = x.kv.mismatch(kv); !other.empty() && why.empty())
                why = fmt::format("it cannot join the cluster: its pool would hold {} (member instance {}): serve "
                                  "the members' model with their --kv-type", other, x.inst_id);
            }
          },
          [&](const caf::error& e) { why = "the gManager did not answer: " + sys.render(e); });
  return why;
}

/// An instance process while it runs: what its steps below share.
struct instance_run {
  const instance_flags& flags;
  std::string me;  ///< "illm instance N", for its log lines
  caf::actor_system& sys;
  actors::control_endpoint control;  ///< its own control port
  std::shared_ptr<gmanager_seen> seen = std::make_shared<gmanager_seen>();
  std::shared_ptr<peer_error_sink> sink = std::make_shared<peer_error_sink>();
  actors::gmanager_link_actor link;    ///< follows the gManagers of --join
  actors::control_links_actor links;   ///< links to the other instances' control ports
  metrics_endpoint endpoint;  ///< its metrics' registry and server (they outlive the node, which reports there)
  std::unique_ptr<actors::instance_node> node;

  /// The gManager linked now (none: none is reachable).
  actors::gmanager_actor gmanager() const {
    std::lock_guard lock(seen->mutex);
    return seen->gmanager;
  }
};

/// The local address this host reaches `at` from (the address its peers can reach it at); 127.0.0.1 when
/// there is no route.
std::string local_address_towards(const actors::control_endpoint& at) {
  std::string out = "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(at.host.c_str(), std::to_string(at.port).c_str(), &hints, &found) != 0 || !found) return out;
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in local{};
  socklen_t len = sizeof(local);
  char text[INET_ADDRSTRLEN] = {};
  if (fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
      inet_ntop(AF_INET, &local.sin_addr, text, sizeof(text)))
    out = text;
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  return out;
}

/// Opens this instance's control port (--listen, or a free port on the address that reaches the first
/// gManager): peers connect to it, so that their messages to its actors come directly.
actors::control_endpoint open_control_port(caf::actor_system& sys, const instance_flags& flags,
                                           const std::vector<actors::control_endpoint>& gmanagers) {
  actors::control_endpoint at{local_address_towards(gmanagers.front()), 0};
  if (!flags.listen.empty()) {
    const host_port given = parse_host_port(flags.listen, "--listen", true);
    at = {given.host, given.port};
  }
  check_listen(flags.security, at.host, "--listen");
  auto port = actors::open_control(sys, at.port, at.host);
  if (!port) fail(fmt::format("--listen {}: cannot listen: {}", actors::to_string(at), sys.render(port.error())));
  at.port = *port;
  return at;
}

/// Starts the link that follows the gManagers of --join: each one reached is told to the rManager; each loss
/// is logged, and the instance serves on from its last view.
void link_gmanagers(instance_run& r, const std::vector<actors::control_endpoint>& gmanagers) {
  actors::gmanager_link_config lc;
  lc.addresses = gmanagers;
  const std::string me = r.me;
  lc.on_linked = [seen = r.seen, me](const actors::gmanager_actor& gm, const actors::control_endpoint& at,
                                     uint64_t epoch) {
    std::lock_guard lock(seen->mutex);
    seen->gmanager = gm;
    if (!seen->rmanager) return;
    log("{}: reached the gManager at {} (epoch {}): joining it", me, actors::to_string(at), epoch);
    caf::anon_send(seen->rmanager, actors::use_gmanager{gm});
  };
  lc.on_lost = [seen = r.seen, me](const std::string& why) {
    std::lock_guard lock(seen->mutex);
    seen->gmanager = actors::gmanager_actor{};
    log("{}: the gManager is gone ({}): serving on from the last view, reaching a gManager again", me, why);
  };
  lc.on_failed_round = [seen = r.seen](const std::string& why) {
    std::lock_guard lock(seen->mutex);
    seen->last_error = why;
  };
  auto refused = [metrics = r.endpoint.metrics] {
    if (metrics) metrics->cluster_peers_refused.with().add();
  };
  lc.on_refused = refused;
  r.link = actors::spawn_gmanager_link(r.sys, lc);
  actors::control_links_config cc;
  cc.on_refused = refused;
  cc.self = r.control;
  cc.self_id = actors::instance_id(r.flags.id);
  cc.on_link = [me](actors::instance_id id, const actors::control_endpoint& at, const std::string& why) {
    if (!why.empty()) log("{}: cannot link to instance {} at {}: {}", me, id, actors::to_string(at), why);
  };
  r.links = actors::spawn_control_links(r.sys, cc);
}

/// Stops this instance's actors and waits (bounded) until each is down. Not await_all_actors_done: after a
/// session with a remote gManager, CAF 0.17 keeps one actor of its own counted as running (not ours: each of
/// ours is down), which would hang it, and the actor system's destructor, for ever.
void stop_all(instance_run& r) {
  std::vector<caf::actor_addr> mine;
  if (r.node) mine = r.node->actors();
  for (const caf::actor_addr& a : {r.link.address(), r.links.address()})
    if (a) mine.push_back(a);
  caf::scoped_actor waiter{r.sys, true};
  for (const caf::actor_addr& a : mine) waiter->monitor(a);
  if (r.node) r.node->stop();
  {
    std::lock_guard lock(r.sink->mutex);
    r.sink->node = nullptr;
  }
  {
    std::lock_guard lock(r.seen->mutex);
    r.seen->rmanager = actors::rmanager_actor{};
    r.seen->gmanager = actors::gmanager_actor{};
  }
  if (r.link) caf::anon_send_exit(r.link, caf::exit_reason::user_shutdown);
  if (r.links) caf::anon_send_exit(r.links, caf::exit_reason::user_shutdown);
  r.link = actors::gmanager_link_actor{};
  r.links = actors::control_links_actor{};
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

/// Waits up to `wait` for the link to reach a gManager; fails with why it could not.
actors::gmanager_actor first_gmanager(instance_run& r, std::chrono::seconds wait) {
  const auto deadline = std::chrono::steady_clock::now() + wait;
  while (!r.gmanager() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (actors::gmanager_actor gm = r.gmanager()) return gm;
  std::string why;
  {
    std::lock_guard lock(r.seen->mutex);
    why = r.seen->last_error;
  }
  stop_and_fail(r, fmt::format("cannot reach a gManager at {}: {}", r.flags.join, why.empty() ? "no answer" : why));
}

/// Waits until a gManager's view lists this instance with its instance actor.
bool wait_joined(instance_run& r) {
  caf::scoped_actor s{r.sys, true};  // hidden: await_all_actors_done does not wait for it
  for (int i = 0; i < 100; ++i) {
    bool joined = false;
    if (actors::gmanager_actor gm = r.gmanager())
      s->request(gm, std::chrono::seconds(2), actors::view_atom::value)
          .receive(
              [&](actors::cluster_view& v) {
                for (const auto& x : v.instances)
                  if (x.inst_id == r.node->id() && x.instance == r.node->instance()) {
                    joined = true;
                    log("{}: joined ({} instances in the cluster; control port {})", r.me, v.instances.size(),
                        actors::to_string(r.control));
                  }
              },
              [&](const caf::error&) {});
    if (joined) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

/// On a stop signal: the rManager stops lending to others and the gManager (when one is reachable) stops
/// lending and routing to it; waits (up to --drain-timeout-s) until it serves and hosts nothing, then leaves
/// the cluster. Without a gManager it leaves without telling one: the members see it go.
void drain_and_leave(instance_run& r) {
  caf::scoped_actor s{r.sys, true};
  s->send(r.node->rmanager(), actors::drain_instance{r.node->id()});
  if (actors::gmanager_actor gm = r.gmanager()) s->send(gm, actors::drain_instance{r.node->id()});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(r.flags.drain_timeout_s);
  bool idle = false;
  while (!idle && std::chrono::steady_clock::now() < deadline) {
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
  if (actors::gmanager_actor gm = r.gmanager())
    s->request(gm, std::chrono::seconds(5), actors::leave_cluster{r.node->id()})
        .receive([&] { left = true; }, [&](const caf::error& e) { log("{}: leave: {}", r.me, r.sys.render(e)); });
  log("{}: left the cluster{}", r.me, left ? "" : " without telling a gManager (none is reachable)");
}

/// Starts this instance's node in `r` (its plane made first, its options from the flags) on gManager `gm`.
void start_node(instance_run& r, const gpu::loaded_model& model, const actors::gmanager_actor& gm) {
  actors::instance_node_options o;
  size_t address_bytes = 0;
  const actors::faults::fault_plan plan = fault_plan_of(r.flags.faults, actors::faults::fault_role::instance);
  std::shared_ptr<transport::data_plane> plane = make_plane(r.flags, plan, address_bytes, o, r.sink);
  o.id = actors::instance_id(r.flags.id);
  o.node = r.flags.node.empty() ? host_name() : r.flags.node;
  o.control = r.control;
  o.on_view = [links = r.links](const actors::cluster_view& v) { caf::anon_send(links, v); };
  announce_faults(plan, r.me);
  if (plan.in_actors()) o.faults = std::make_shared<actors::faults::control_faults>(plan);
  const gpu::kv_identity kv =
      gpu::kv_identity_of(*model.weights, gpu::parse_dtype(r.flags.instance.kv_type).value_or(gpu::dtype::f32));
  if (const std::string refused = why_not_join(r.sys, gm, o.id, kv); !refused.empty())
    stop_and_fail(r, fmt::format("{}: {}", r.me, refused), 2);
  o.metrics = r.endpoint.metrics;
  if (r.endpoint.registry)
    actors::metrics::add_gmanager_connected(*r.endpoint.registry, r.flags.metrics_prefix, [seen = r.seen] {
      std::lock_guard lock(seen->mutex);
      return bool(seen->gmanager);
    });
  if (r.endpoint.registry)
    add_faults_metric(*r.endpoint.registry, r.flags.metrics_prefix,
                      [control = o.faults, weak = std::weak_ptr<transport::data_plane>(plane)] {
                        actors::faults::fault_counts out = control ? control->injected() : actors::faults::fault_counts{};
                        if (auto p = weak.lock())
                          for (const auto& [kind, n] : p->faults_injected()) out[kind] += n;
                        return out;
                      });
  o.instance = r.flags.instance;
  o.instance.backend = instance_backend(r.flags.instance.backend, "instance");
  o.batch = r.flags.batch;
  o.constraints =  // structured outputs' grammars
      std::make_shared<gpu::grammar::constraint_cache>(model.vocab, actors::constraint_budget_of(r.flags.instance));
  if (r.endpoint.registry)
    actors::metrics::add_constraint_cache_gauges(*r.endpoint.registry, r.flags.metrics_prefix, o.constraints);
  auto started = actors::instance_node::start(r.sys, model.weights, o, plane, gm);
  if (!started.is_ok()) stop_and_fail(r, started.error().message());
  r.node = std::move(started).value();
  {
    std::lock_guard lock(r.sink->mutex);
    r.sink->node = r.node.get();
  }
  {
    std::lock_guard lock(r.seen->mutex);
    r.seen->rmanager = r.node->rmanager();
    if (r.seen->gmanager != gm) caf::anon_send(r.seen->rmanager, actors::use_gmanager{r.seen->gmanager});
  }
  log("{}: joining the gManager ({} ({}), {} KV blocks of {} bytes, UCX plane over {} on {}, worker address {} "
      "bytes)",
      r.me, model.name, r.flags.model, r.flags.instance.kv_blocks_per_instance, r.node->pool().layout().block_bytes(),
      r.flags.ucx_tls, r.flags.ucx_net_devices, address_bytes);
}

void run_instance(const instance_flags& flags) {
  if (flags.join.empty()) fail("--join is required (as a flag or in --config)", 2);
  const std::vector<actors::control_endpoint> gmanagers = parse_host_port_list(flags.join, "--join");
  if (!flags.listen.empty()) check_listen(flags.security, parse_host_port(flags.listen, "--listen", true).host, "--listen");
  (void)instance_backend(flags.instance.backend, "instance");  // a backend it cannot use fails before anything
  check_tls_options(flags.security, fmt::format("illm instance {}", flags.id));
  (void)fault_plan_of(flags.faults, actors::faults::fault_role::instance);  // a bad spec fails before loading
  const sigset_t stop_signals = block_stop_signals();
  const gpu::loaded_model model = load_model_or_fail(
      flags.model, {.weight_type = weight_type_of(flags.weight_type, "instance")}, fmt::format("illm instance {}", flags.id));

  auto cfg = actors::networked_config();
  caf::actor_system sys{*cfg};
  auto tls = actors::start_control_plane(sys, flags.security, fmt::format("illm instance {}", flags.id));
  if (!tls.is_ok()) fail(tls.error().message(), 2);
  instance_run r{flags, fmt::format("illm instance {}", flags.id), sys, open_control_port(sys, flags, gmanagers)};
  r.endpoint = start_metrics(flags.metrics_listen, flags.metrics_prefix, r.me);
  link_gmanagers(r, gmanagers);
  start_node(r, model, first_gmanager(r, std::chrono::seconds(10)));
  if (!wait_joined(r))
    stop_and_fail(r, fmt::format("{}: the gManager did not list this instance (another instance with id {} may "
                                 "have joined meanwhile)",
                                 r.me, flags.id));

  const periodic_trim trim;
  std::atomic<bool> never{false};
  const int signal = wait_for_stop_signal(stop_signals, never);
  log("{}: {} received: draining", r.me, stop_signal_name(signal));
  drain_and_leave(r);
  stop_all(r);
}

/// The options that place the instance in a cluster: the gManager it joins, its control port, its id and node.
void add_membership_flags(CLI::App& cmd, instance_flags& f) {
  cmd.add_option("--join", f.join,
                 "The gManager's HOST:PORT, or a comma-separated list of the addresses a gManager may run at "
                 "(required, here or in --config)");
  cmd.add_option("--listen", f.listen,
                 "HOST:PORT of this instance's control port, which the other processes connect to (default: a free "
                 "port on the address that reaches the gManager)");
  cmd.add_option("--id", f.id, "This instance's id, unique in the cluster (default 0)")->check(CLI::Range(0, 4095));
  cmd.add_option("--node", f.node,
                 "The node (host) this instance runs on (default: the host name): a long step's queries to "
                 "several holders on another node go there once, through one of them");
}

/// The options of its data plane and of its life: UCX transports and devices, the drain on SIGTERM, injected faults.
void add_plane_flags(CLI::App& cmd, instance_flags& f) {
  cmd.add_option("--ucx-tls", f.ucx_tls, "UCX_TLS of the data plane (default tcp)");
  cmd.add_option("--ucx-net-devices", f.ucx_net_devices, "UCX_NET_DEVICES of the data plane (default lo)");
  cmd.add_option("--drain-timeout-s", f.drain_timeout_s, "On SIGTERM, how long to wait to be idle (default 30)")
      ->check(CLI::Range(0, 3600));
  cmd.add_option("--faults", f.faults,
                 "Faults this instance injects, seeded: e.g. seed=7,send.drop=0.01,reply.drop=0.05 (docs/faults.md; "
                 "default: none)");
}

}  // namespace

void add_instance_command(CLI::App& app) {
  auto f = std::make_shared<instance_flags>();
  CLI::App* icmd = app.add_subcommand("instance", "Run one instance that joins a gManager (illm gmanager)");
  add_membership_flags(*icmd, *f);
  add_model_flags(*icmd, f->model, f->weight_type);
  add_kv_type_flag(*icmd, f->instance.kv_type);
  add_prefix_cache_flag(*icmd, f->instance.prefix_cache);
  add_plane_flags(*icmd, *f);
  add_backend_flags(*icmd, f->instance.backend, f->instance.devices, "this instance");
  add_setting_flags(icmd, actors::instance_settings_table(), f->instance);
  add_setting_flags(icmd, actors::batch_settings_table(), f->batch);
  add_metrics_options(icmd, f->metrics_listen, f->metrics_prefix);
  add_tls_options(icmd, f->security, true);
  add_config_file(icmd,
                  R"({"join": "10.0.0.1:7000", "id": 3, "kv-blocks-per-instance": 4096, "ucx-net-devices": "eth0"})");
  icmd->callback([f] { run_instance(*f); });
}

}  // namespace illm::cli
