#include "actors/cluster/remote_cluster.hpp"

#include <algorithm>
#include <random>
#include <set>
#include <thread>

#include <caf/io/all.hpp>
#include <fmt/format.h>

namespace illm::actors {

namespace {

/// A first request id unlikely to meet another front end's: ids stay below 2^52 (exact in JSON numbers).
request_id random_first_id() {
  std::random_device rd;
  const uint64_t r = uint64_t(rd()) << 32 | rd();
  return (r & ((uint64_t(1) << 51) - 1)) + 1;
}

constexpr auto watch_period = std::chrono::milliseconds(500);

/// Watches the cluster for this front end's requests. A request actor monitors its instance, but the down
/// message of an instance in another process may never reach this one (CAF routes it through the
/// gManager's node), so the watcher asks the gManager's view every period and, when a member left it (or
/// the gManager is gone), tells the request actors the view: those served by a missing member go on
/// elsewhere.
caf::behavior watch_cluster(caf::event_based_actor* self, gmanager_actor gm, std::shared_ptr<std::atomic<bool>> alive,
                            request_table* requests) {
  auto members = std::make_shared<std::set<instance_id>>();
  self->monitor(gm);
  self->set_down_handler([=](const caf::down_msg&) {
    *alive = false;
    requests->tell_view(cluster_view{});
  });
  self->send(self, liveness_tick_atom::value);
  return {
      [=](liveness_tick_atom) {
        self->delayed_send(self, watch_period, liveness_tick_atom::value);
        self->request(gm, std::chrono::seconds(5), view_atom::value)
            .then(
                [=](const cluster_view& v) {
                  const std::set<instance_id> now(v.members.begin(), v.members.end());
                  const bool left = !std::includes(now.begin(), now.end(), members->begin(), members->end());
                  *members = std::move(now);
                  if (left) requests->tell_view(v);
                },
                [](const caf::error&) {});  // a slow gManager: the next period asks again
      },
  };
}

}  // namespace

remote_cluster::remote_cluster()
    : request_router(/*resume_elsewhere=*/true), next_request_(random_first_id()), gmanager_alive_(std::make_shared<std::atomic<bool>>(true)) {}

remote_cluster::~remote_cluster() { shutdown(std::chrono::milliseconds(0)); }

gpu::result<std::unique_ptr<remote_cluster>> remote_cluster::connect(const std::string& host, uint16_t port) {
  std::unique_ptr<remote_cluster> c(new remote_cluster());
  c->config_ = std::make_unique<caf::actor_system_config>();
  register_messages(*c->config_);
  quiet_idle_scheduler(*c->config_);
  c->config_->load<caf::io::middleman>();
  c->system_ = std::make_unique<caf::actor_system>(*c->config_);
  auto gm = c->system_->middleman().remote_actor<gmanager_actor>(host, port);
  if (!gm)
    return gpu::status{gpu::status_code::io_error,
                       fmt::format("cannot reach the gManager at {}:{}: {}", host, port, c->system_->render(gm.error()))};
  c->gmanager_ = *gm;
  c->watcher_ = c->system_->spawn(watch_cluster, *gm, c->gmanager_alive_, &c->requests_);
  std::string error;
  caf::scoped_actor s{*c->system_, true};
  s->request(c->gmanager_, std::chrono::seconds(5), view_atom::value)
      .receive([](const cluster_view&) {},
               [&](const caf::error& e) { error = "the gManager did not answer: " + c->system_->render(e); });
  if (!error.empty()) return gpu::status{gpu::status_code::io_error, error};
  return c;
}

cluster_view remote_cluster::view() {
  cluster_view out;
  if (!gmanager_alive() || stopped_) return out;
  caf::scoped_actor s{*system_, true};
  s->request(gmanager_, std::chrono::seconds(5), view_atom::value)
      .receive([&](cluster_view& v) { out = std::move(v); }, [](const caf::error&) {});
  return out;
}

std::vector<move_report> remote_cluster::moves_of(request_id id) {
  std::vector<move_report> out;
  if (!gmanager_alive() || stopped_) return out;
  caf::scoped_actor s{*system_, true};
  s->request(gmanager_, std::chrono::seconds(5), moves_atom::value, id)
      .receive([&](std::vector<move_report>& v) { out = std::move(v); }, [](const caf::error&) {});
  return out;
}

request_id remote_cluster::submit(const generate_params& params, request_callbacks callbacks,
                                  const cluster_view& view) {
  const request_id id = next_request_++;
  const instance_view* target = stopped_ ? nullptr : most_free_instance(view);
  if (!target) {
    const char* why = stopped_            ? "the front end is stopping"
                      : gmanager_alive() ? "the cluster has no instance that takes requests"
                                         : "the gManager is gone";
    if (callbacks.on_finished) callbacks.on_finished({id, "error", why, 0, {}});
    return id;
  }
  requests_.spawn(*system_, id, params, {target->instance, target->inst_id}, std::move(callbacks));
  return id;
}

void remote_cluster::shutdown(std::chrono::milliseconds grace) {
  if (stopped_ || !system_) return;
  stopped_ = true;
  requests_.cancel_all();
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (requests_.size() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  requests_.exit_all();
  if (watcher_) caf::anon_send_exit(watcher_, caf::exit_reason::user_shutdown);
  watcher_ = caf::actor{};
  gmanager_ = gmanager_actor{};
  // Not await_all_actors_done: CAF 0.17 counts one of the middleman's own actors as running after a
  // session with a remote node (see illm instance).
  system_->await_actors_before_shutdown(false);
  system_.reset();
  requests_.clear();
}

}  // namespace illm::actors
