// `illm gmanager`: the gManager of a cluster of processes, published on a TCP port by CAF's io middleman (mutual
// TLS with --tls-*). Instance processes (`illm instance --join`) join it with the ordinary join message, so that
// their heartbeats, and its monitor on their rManagers, cross the network. It is soft state: instances serve on
// from their last view while it is gone, and join it again when it is back. Membership changes and moves are
// logged one line each on stderr.
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

#include "actors/cli/backend_flag.hpp"
#include "actors/cli/commands.hpp"
#include "actors/cli/fault_flags.hpp"
#include "actors/cli/setting_flags.hpp"
#include "actors/cli/memory_trim.hpp"
#include "actors/cli/stop_signals.hpp"
#include "actors/cluster/control_links.hpp"
#include "actors/cluster/control_security.hpp"
#include "actors/cluster/gmanager_link.hpp"
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

struct gmanager_flags {
  std::string listen;
  actors::control_security security;
  std::string metrics_listen, metrics_prefix = "illm:";
  std::string profile;  // the greedy policy's; empty: the simple policy
  std::string faults;   // the fault plan it injects (order.*, crash=after_order); empty: none
  actors::gmanager_settings gmanager;
};

std::string ids(const std::vector<actors::request_id>& v) {
  return fmt::format("[{}]", fmt::join(v, ", "));
}

void run_gmanager(const gmanager_flags& flags) {
  if (flags.listen.empty()) fail("--listen is required (as a flag or in --config)", 2);
  const host_port at = parse_host_port(flags.listen, "--listen", true);
  check_listen(flags.security, at.host, "--listen");
  check_tls_options(flags.security, "illm gmanager");
  const actors::faults::fault_plan plan = fault_plan_of(flags.faults, actors::faults::fault_role::gmanager);
  const sigset_t stop_signals = block_stop_signals();
  auto cfg = actors::networked_config();
  caf::actor_system sys{*cfg};
  auto tls = actors::start_control_plane(sys, flags.security, "illm gmanager");
  if (!tls.is_ok()) fail(tls.error().message(), 2);

  metrics_endpoint endpoint = start_metrics(flags.metrics_listen, flags.metrics_prefix, "illm gmanager");
  auto members = std::make_shared<std::atomic<int>>(0);
  actors::gmanager_config g;
  g.metrics = endpoint.metrics;
  announce_faults(plan, "illm gmanager");
  if (plan.in_actors()) g.faults = std::make_shared<actors::faults::control_faults>(plan);
  if (endpoint.registry)
    add_faults_metric(*endpoint.registry, flags.metrics_prefix, [faults = g.faults] {
      return faults ? faults->injected() : actors::faults::fault_counts{};
    });
  g.policy_period = std::chrono::milliseconds(flags.gmanager.policy_period_ms);
  g.heartbeat_timeout = std::chrono::milliseconds(flags.gmanager.heartbeat_timeout_ms);
  g.dead_after = std::chrono::milliseconds(flags.gmanager.dead_after_ms);
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
  auto port = actors::publish_control(sys, caf::actor_cast<caf::strong_actor_ptr>(gm), sys.message_types(gm), at.port,
                                      at.host);
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
  caf::anon_send(actors::control_connector(sys), caf::close_atom::value, *port);
  caf::anon_send_exit(gm, caf::exit_reason::user_shutdown);
  gm = actors::gmanager_actor{};
  sys.await_all_actors_done();
  log("illm gmanager: stopped");
}

}  // namespace

void add_gmanager_command(CLI::App& app) {
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
  gcmd->add_option("--faults", g->faults,
                   "Faults the gManager injects, seeded: its move orders lost, twice or late, and a crash after "
                   "ordering moves: e.g. seed=3,order.drop=0.1,crash=after_order@5 (docs/faults.md; default: none)");
  add_metrics_options(gcmd, g->metrics_listen, g->metrics_prefix);
  add_tls_options(gcmd, g->security, true);
  add_config_file(gcmd, R"({"listen": "0.0.0.0:7000", "heartbeat-timeout-ms": 2000})");
  gcmd->callback([g] { run_gmanager(*g); });
}

}  // namespace illm::cli
