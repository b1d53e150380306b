#include "actors/cluster/remote_cluster.hpp"

#include <algorithm>
#include <random>
#include <set>
#include <thread>
#include <mutex>

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

void log_line(const std::function<void(const std::string&)>& log, const std::string& line) {
  if (log) return log(line);
  fmt::print(stderr, "{}\n", line);
  std::fflush(stderr);
}

}  // namespace

struct cluster_picture {
  std::mutex mutex;
  gmanager_actor gmanager;  ///< the gManager linked now; none: none is reachable
  cluster_view view;        ///< the last settled view, less the instances whose links broke
  std::set<caf::actor_addr> gone;  ///< rManagers whose links broke: left out of every later view
  std::string last_error;          ///< why the last round reached no gManager
  std::function<void(const std::string&)> log;
  request_table* requests = nullptr;
  control_links_actor links;
  size_t next_asked = 0;  ///< which instance is asked for its view while no gManager is reachable

  /// Takes `v` (settled) as the view, less the instances gone; tells the request actors when a member left.
  void adopt(cluster_view v) {
    auto gone_id = [&](const instance_view& i) { return gone.count(i.rmanager.address()) > 0; };
    for (const instance_view& i : v.instances)
      if (gone_id(i)) v.members.erase(std::remove(v.members.begin(), v.members.end(), i.inst_id), v.members.end());
    v.instances.erase(std::remove_if(v.instances.begin(), v.instances.end(), gone_id), v.instances.end());
    const std::set<instance_id> before(view.members.begin(), view.members.end()), now(v.members.begin(), v.members.end());
    const bool left = !std::includes(now.begin(), now.end(), before.begin(), before.end());
    view = std::move(v);
    if (links) caf::anon_send(links, view);
    if (left) requests->tell_view(view);
  }
};

namespace {

/// Refreshes the picture every period: the gManager's view when one is linked, else the view of an instance of
/// the last view (the last one its rManager had; a request actor monitors its instance, and the links watch every
/// instance, so a lost instance leaves the picture without the gManager). Views not settled are left out.
caf::behavior watch_cluster(caf::event_based_actor* self, std::shared_ptr<cluster_picture> picture) {
  auto take = [=](cluster_view& v) {
    if (!v.settled) return;  // a gManager that just started: its view may lack members
    std::lock_guard lock(picture->mutex);
    picture->adopt(std::move(v));
  };
  self->send(self, liveness_tick_atom::value);
  return {
      [=](liveness_tick_atom) {
        self->delayed_send(self, watch_period, liveness_tick_atom::value);
        gmanager_actor gm;
        rmanager_actor asked;
        {
          std::lock_guard lock(picture->mutex);
          gm = picture->gmanager;
          const auto& instances = picture->view.instances;
          if (!gm && !instances.empty()) asked = instances[picture->next_asked++ % instances.size()].rmanager;
        }
        if (gm)
          self->request(gm, std::chrono::seconds(5), view_atom::value).then(take, [](const caf::error&) {});
        else if (asked)
          self->request(asked, std::chrono::seconds(5), view_atom::value).then(take, [](const caf::error&) {});
      },
  };
}

/// The link's callbacks: the picture's gManager follows it, and each change is logged.
gmanager_link_config link_config(const std::vector<control_endpoint>& gmanagers,
                                 const std::shared_ptr<cluster_picture>& picture) {
  gmanager_link_config lc;
  lc.addresses = gmanagers;
  lc.on_linked = [picture](const gmanager_actor& gm, const control_endpoint& at, uint64_t epoch) {
    std::lock_guard lock(picture->mutex);
    const bool first = !picture->view.epoch;
    picture->gmanager = gm;
    if (!first) log_line(picture->log, fmt::format("the front end reached the gManager at {} (epoch {})", to_string(at), epoch));
  };
  lc.on_lost = [picture](const std::string& why) {
    std::lock_guard lock(picture->mutex);
    picture->gmanager = gmanager_actor{};
    log_line(picture->log, fmt::format("the front end lost the gManager ({}): serving on from its last view of {} "
                                       "instances, reaching a gManager again",
                                       why, picture->view.instances.size()));
  };
  lc.on_failed_round = [picture](const std::string& why) {
    std::lock_guard lock(picture->mutex);
    picture->last_error = why;
  };
  return lc;
}

/// The links' callback: an instance whose link broke leaves the picture at once.
control_links_config links_config(const std::shared_ptr<cluster_picture>& picture) {
  control_links_config cc;
  cc.on_gone = [picture](instance_id id, const std::string& why) {
    std::lock_guard lock(picture->mutex);
    if (const instance_view* i = picture->view.find(id)) picture->gone.insert(i->rmanager.address());
    log_line(picture->log, fmt::format("the front end lost instance {} ({})", id, why));
    picture->adopt(picture->view);
  };
  return cc;
}

}  // namespace

remote_cluster::remote_cluster()
    : request_router(/*resume_elsewhere=*/true),
      next_request_(random_first_id()),
      picture_(std::make_shared<cluster_picture>()) {}

remote_cluster::~remote_cluster() { shutdown(std::chrono::milliseconds(0)); }

gpu::result<std::unique_ptr<remote_cluster>> remote_cluster::connect(const std::vector<control_endpoint>& gmanagers,
                                                                    const control_security& security,
                                                                    std::function<void(const std::string&)> log,
                                                                    std::function<void()> on_refused,
                                                                    std::chrono::milliseconds first_wait) {
  ILLM_RETURN_IF_ERROR(check_control_security(security));
  std::unique_ptr<remote_cluster> c(new remote_cluster());
  c->config_ = networked_config();
  c->system_ = std::make_unique<caf::actor_system>(*c->config_);
  auto tls = start_control_plane(*c->system_, security, "illm front end");
  if (!tls.is_ok()) return tls.error();
  c->tls_ = std::move(tls).value();
  auto& picture = *c->picture_;
  picture.log = std::move(log);
  picture.requests = &c->requests_;
  control_links_config cc = links_config(c->picture_);
  cc.on_refused = on_refused;
  picture.links = spawn_control_links(*c->system_, std::move(cc));
  c->links_ = picture.links;
  gmanager_link_config lc = link_config(gmanagers, c->picture_);
  lc.on_refused = std::move(on_refused);
  c->link_ = spawn_gmanager_link(*c->system_, std::move(lc));
  const auto deadline = std::chrono::steady_clock::now() + first_wait;
  while (!c->gmanager() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::vector<std::string> at;
  for (const control_endpoint& e : gmanagers) at.push_back(to_string(e));
  if (!c->gmanager()) {
    std::lock_guard lock(picture.mutex);
    return gpu::status{gpu::status_code::io_error, fmt::format("cannot reach a gManager at {}: {}", fmt::join(at, ", "),
                                                               picture.last_error.empty() ? "no answer" : picture.last_error)};
  }
  std::string error;
  caf::scoped_actor s{*c->system_, true};
  s->request(c->gmanager(), std::chrono::seconds(5), view_atom::value)
      .receive(
          [&](cluster_view& v) {
            std::lock_guard lock(picture.mutex);
            picture.adopt(std::move(v));
          },
          [&](const caf::error& e) { error = "the gManager did not answer: " + c->system_->render(e); });
  if (!error.empty()) return gpu::status{gpu::status_code::io_error, error};
  c->watcher_ = c->system_->spawn<caf::hidden>(watch_cluster, c->picture_);
  return c;
}

gmanager_actor remote_cluster::gmanager() const {
  std::lock_guard lock(picture_->mutex);
  return picture_->gmanager;
}

bool remote_cluster::gmanager_linked() const { return bool(gmanager()); }

cluster_view remote_cluster::view() {
  if (stopped_) return {};
  if (gmanager_actor gm = gmanager()) {
    caf::scoped_actor s{*system_, true};
    s->request(gm, std::chrono::seconds(5), view_atom::value)
        .receive(
            [&](cluster_view& v) {
              if (!v.settled) return;
              std::lock_guard lock(picture_->mutex);
              picture_->adopt(std::move(v));
            },
            [](const caf::error&) {});
  }
  std::lock_guard lock(picture_->mutex);
  return picture_->view;
}

std::optional<cluster_status> remote_cluster::status() {
  gmanager_actor gm = gmanager();
  if (!gm || stopped_) return std::nullopt;
  return ask_status(*system_, gm);
}

std::vector<move_report> remote_cluster::moves_of(request_id id) {
  std::vector<move_report> out;
  gmanager_actor gm = gmanager();
  if (!gm || stopped_) return out;
  caf::scoped_actor s{*system_, true};
  s->request(gm, std::chrono::seconds(5), moves_atom::value, id)
      .receive([&](std::vector<move_report>& v) { out = std::move(v); }, [](const caf::error&) {});
  return out;
}

request_id remote_cluster::submit(const generate_params& params, request_callbacks callbacks,
                                  const cluster_view& view) {
  const request_id id = next_request_++;
  if (stopped_ || !most_free_instance(view)) {
    const char* why = stopped_ ? "the front end is stopping" : "the cluster has no instance that takes requests";
    if (callbacks.on_finished) callbacks.on_finished({id, "error", why, 0, {}});
    return id;
  }
  std::optional<prefix_holders> prefix = look_up_prefix(*system_, gmanager(), view, params);
  auto choose = [&](const routed_blocks& routed) {
    const instance_view* target = route_request(view, params, prefix, routed);
    return serving_instance{target->instance, target->inst_id};
  };
  requests_.spawn(*system_, id, params, choose, std::move(callbacks), view, prefix);
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
  if (link_) caf::anon_send_exit(link_, caf::exit_reason::user_shutdown);
  if (links_) caf::anon_send_exit(links_, caf::exit_reason::user_shutdown);
  watcher_ = caf::actor{};
  link_ = gmanager_link_actor{};
  links_ = control_links_actor{};
  {
    std::lock_guard lock(picture_->mutex);
    picture_->gmanager = gmanager_actor{};
    picture_->links = control_links_actor{};
    picture_->view = cluster_view{};
  }
  // Not await_all_actors_done: CAF 0.17 counts one of the middleman's own actors as running after a
  // session with a remote node (see illm instance).
  tls_.stop();
  system_->await_actors_before_shutdown(false);
  system_.reset();
  requests_.clear();
}

}  // namespace illm::actors
