#include "actors/cluster/cluster.hpp"

#include <thread>

#include <fmt/format.h>

#include "actors/gmanager.hpp"
#include "actors/placement/simple_policy.hpp"
#include "actors/cluster/remote.hpp"
#include "actors/logic/status_bridge.hpp"
#include "transport/registry.hpp"

namespace illm::actors {

cluster::cluster(bool resume_elsewhere) : request_router(resume_elsewhere), events_(std::make_shared<event_log>()) {}

cluster::~cluster() { shutdown(); }

namespace {

int threads_for(const cluster_options& o) {
  if (o.instance.threads_per_instance > 0) return o.instance.threads_per_instance;
  return std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, o.instances));
}

}  // namespace

gpu::result<std::unique_ptr<cluster>> cluster::start(std::shared_ptr<const gpu::model_weights> weights,
                                                     const cluster_options& options) {
  if (options.instances < 1 || options.instances > 64)
    return gpu::status{gpu::status_code::invalid_argument,
                       fmt::format("--instances {} is outside 1..64", options.instances)};
  std::unique_ptr<cluster> c(new cluster(options.resume_elsewhere));
  ILLM_RETURN_IF_ERROR(c->build(std::move(weights), options));
  // Every rManager joins at spawn; wait until the gManager lists all instances with their actors.
  for (int i = 0; i < 500; ++i) {
    const cluster_view v = c->view();
    if (int(v.instances.size()) == options.instances &&
        std::all_of(v.instances.begin(), v.instances.end(), [](const auto& x) { return bool(x.instance); }))
      return c;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return gpu::status{gpu::status_code::internal, "the instances did not join the gManager"};
}

gpu::status cluster::build(std::shared_ptr<const gpu::model_weights> weights, const cluster_options& options) {
  config_ = std::make_unique<caf::actor_system_config>();
  register_messages(*config_);
  quiet_idle_scheduler(*config_);
  system_ = std::make_unique<caf::actor_system>(*config_);
  gmanager_config& gcfg = gmanager_config_;
  gcfg.policy_period = std::chrono::milliseconds(options.gmanager.policy_period_ms);
  gcfg.policy = options.policy ? options.policy : placement::policy(placement::simple_policy);
  gcfg.heartbeat_timeout = std::chrono::milliseconds(options.gmanager.heartbeat_timeout_ms);
  gcfg.metrics = options.metrics;
  gmanager_ = spawn_gmanager(*system_, gcfg);

  const auto group = transport::make_plane_group("inproc");
  const faults::fault_plan& plan = options.faults;
  if (plan.control.any())
    control_faults_ = std::make_shared<faults::control_faults>(plan.control, plan.data.seed, plan.data.delay);
  instance_node_options o;
  o.faults = control_faults_;
  o.log = options.log;
  o.instance = options.instance;
  o.instance.threads_per_instance = threads_for(options);
  o.batch = options.batch;
  o.metrics = options.metrics;
  o.events = events_;
  killed_.assign(size_t(options.instances), false);
  for (int i = 0; i < options.instances; ++i) {
    o.id = instance_id(i);
    transport::plane_options po{.self = o.id, .group = group};
    if (plan.data_faults) po.faults = plan.data_text_for(uint64_t(i));
    auto endpoint = transport::make_plane(plan.data_faults ? "faulty:inproc" : "inproc", po);
    if (!endpoint.is_ok()) return engine_status(endpoint.error());
    auto node = instance_node::start(*system_, weights, o, endpoint.value(), gmanager_);
    if (!node.is_ok()) return node.error();
    nodes_.push_back(std::move(node).value());
  }
  return gpu::status::ok();
}

gmanager_actor cluster::gmanager() const {
  std::lock_guard lock(gmanager_mutex_);
  return gmanager_;
}

cluster_view cluster::view() {
  cluster_view out;
  caf::scoped_actor s{*system_};
  s->request(gmanager(), std::chrono::seconds(5), view_atom::value)
      .receive([&](cluster_view& v) { out = std::move(v); }, [&](const caf::error&) {});
  return out;
}

int cluster::size() const { return int(nodes_.size()); }

faults::fault_counts cluster::faults_injected() const {
  faults::fault_counts out = control_faults_ ? control_faults_->injected() : faults::fault_counts{};
  for (const auto& n : nodes_)
    for (const auto& [kind, count] : n->plane().faults_injected()) out[kind] += count;
  return out;
}

request_id cluster::submit(const generate_params& params, request_callbacks callbacks, const cluster_view& view) {
  const request_id id = next_request_++;
  const instance_view* most_free = most_free_instance(view);
  serving_instance target = most_free ? serving_instance{most_free->instance, most_free->inst_id}
                                      : serving_instance{nodes_.front()->instance(), nodes_.front()->id()};
  requests_.spawn(*system_, id, params, std::move(target), std::move(callbacks));
  return id;
}

std::vector<instance_report> cluster::instances() const {
  std::vector<instance_report> out;
  for (const auto& n : nodes_)
    out.push_back({n->id(), n->pool().total_blocks(), n->pool().free_blocks(), n->pool().check(), n->plane().counters(),
                   !killed_[n->id()]});
  return out;
}

bool cluster::kill_instance(instance_id id) {
  if (id >= nodes_.size() || killed_[id]) return false;
  killed_[id] = true;
  nodes_[id]->stop();
  for (const auto& n : nodes_)
    if (!killed_[n->id()]) n->peer_failed(id, "instance " + std::to_string(id) + " was killed");
  cluster_view v;
  for (int i = 0; i < 500; ++i) {  // the gManager hears of it from its monitor on the rManager
    v = view();
    if (!v.has_member(id)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  requests_.tell_view(v);
  return true;
}

void cluster::restart_gmanager() {
  gmanager_actor fresh;
  {
    std::lock_guard lock(gmanager_mutex_);
    caf::anon_send_exit(gmanager_, caf::exit_reason::kill);
    gmanager_config_.epoch = std::max(gmanager_config::default_epoch(), gmanager_config_.epoch + 1);
    gmanager_ = fresh = spawn_gmanager(*system_, gmanager_config_);
  }
  for (const auto& n : nodes_)
    if (!killed_[n->id()]) caf::anon_send(n->rmanager(), use_gmanager{fresh});
}

void cluster::drain_instance(instance_id id) { caf::anon_send(gmanager(), actors::drain_instance{id}); }

bool cluster::wait_pools_free(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto pools = instances();
    if (std::all_of(pools.begin(), pools.end(),
                    [](const auto& i) { return !i.alive || i.free_blocks == i.total_blocks; }))
      return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void cluster::shutdown() {
  if (stopped_ || !system_) return;
  stopped_ = true;
  requests_.cancel_all();
  for (const auto& n : nodes_)
    for (const caf::actor_addr& a : n->actors()) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(gmanager(), caf::exit_reason::user_shutdown);
  requests_.exit_all();
  system_->await_all_actors_done();
  for (const auto& n : nodes_) n->stop();  // drops the handles: detached actors' threads end
  {
    std::lock_guard lock(gmanager_mutex_);
    gmanager_ = gmanager_actor{};
  }
  requests_.clear();
  system_.reset();
}

}  // namespace illm::actors
