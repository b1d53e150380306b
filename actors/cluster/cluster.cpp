#include "actors/cluster/cluster.hpp"

#include <thread>

#include <fmt/format.h>

#include "actors/gmanager.hpp"
#include "actors/placement/simple_policy.hpp"
#include "actors/cluster/remote.hpp"
#include "actors/logic/status_bridge.hpp"
#include "transport/faulty/faulty_plane.hpp"
#include "transport/registry.hpp"

namespace illm::actors {

cluster::cluster(bool resume_elsewhere) : request_router(resume_elsewhere), events_(std::make_shared<event_log>()) {}

cluster::~cluster() { shutdown(); }

namespace {

constexpr int max_instances = 64;

int threads_for(const cluster_options& o) {
  if (o.instance.threads_per_instance > 0) return o.instance.threads_per_instance;
  return std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, o.instances));
}

}  // namespace

gpu::result<std::unique_ptr<cluster>> cluster::start(std::shared_ptr<const gpu::model_weights> weights,
                                                     const cluster_options& options) {
  if (options.instances < 1 || options.instances > max_instances)
    return gpu::status{gpu::status_code::invalid_argument,
                       fmt::format("--instances {} is outside 1..{}", options.instances, max_instances)};
  std::unique_ptr<cluster> c(new cluster(options.resume_elsewhere));
  ILLM_RETURN_IF_ERROR(c->build(std::move(weights), options));
  // Every rManager joins at spawn; wait until the gManager lists all instances with their actors.
  if (!c->wait_members(size_t(options.instances)))
    return gpu::status{gpu::status_code::internal, "the instances did not join the gManager"};
  return c;
}

bool cluster::wait_members(size_t count) {
  for (int i = 0; i < 500; ++i) {
    const cluster_view v = view();
    if (v.instances.size() == count &&
        std::all_of(v.instances.begin(), v.instances.end(), [](const auto& x) { return bool(x.instance); }))
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

gpu::status cluster::build(std::shared_ptr<const gpu::model_weights> weights, const cluster_options& options) {
  weights_ = std::move(weights);
  options_ = options;
  config_ = std::make_unique<caf::actor_system_config>();
  register_messages(*config_);
  quiet_idle_scheduler(*config_);
  system_ = std::make_unique<caf::actor_system>(*config_);
  const faults::fault_plan& plan = options.faults;
  if (plan.in_actors()) control_faults_ = std::make_shared<faults::control_faults>(plan);
  gmanager_config& gcfg = gmanager_config_;
  gcfg.policy_period = std::chrono::milliseconds(options.gmanager.policy_period_ms);
  gcfg.policy = options.policy ? options.policy : placement::policy(placement::simple_policy);
  gcfg.heartbeat_timeout = std::chrono::milliseconds(options.gmanager.heartbeat_timeout_ms);
  gcfg.dead_after = std::chrono::milliseconds(options.gmanager.dead_after_ms);
  gcfg.metrics = options.metrics;
  gcfg.faults = control_faults_;
  gcfg.crash = [this] { after_crash([this] { restart_gmanager(); }); };
  // A member declared dead (its rManager went down, or its heartbeats stopped): the request actors hear the view
  // without it, and those it served go on elsewhere.
  gcfg.on_membership = [this](const membership_event& e) {
    if (e.what == membership_event::kind::down) after_crash([this] { requests_.tell_view(view()); });
  };
  gmanager_ = spawn_gmanager(*system_, gcfg);

  group_ = transport::make_plane_group("inproc");
  for (int i = 0; i < options.instances; ++i) {
    auto node = make_node(instance_id(i));
    if (!node.is_ok()) return node.error();
    std::lock_guard lock(nodes_mutex_);
    nodes_.push_back(std::move(node).value());
    killed_.push_back(false);
  }
  return gpu::status::ok();
}

gpu::result<std::unique_ptr<instance_node>> cluster::make_node(instance_id id) {
  const faults::fault_plan& plan = options_.faults;
  instance_node_options o;
  o.id = id;
  o.faults = control_faults_;
  o.crash = [this, id] {
    if (stop_instance(id)) after_crash([this, id] { announce_death(id); });
  };
  o.log = options_.log;
  o.tap = options_.tap;
  o.plant = options_.plant;
  o.constraints = options_.constraints;
  o.instance = options_.instance;
  o.instance.threads_per_instance = threads_for(options_);
  o.batch = options_.batch;
  o.metrics = options_.metrics;
  o.events = events_;
  // Moves between device pools on one GPU copy device to device, unless the data plane injects faults (which
  // such copies would bypass).
  if (options_.device_copies && !plan.data_faults) o.local_pools = local_pools_;
  o.weights_on_devices = weights_on_devices_;
  transport::plane_options po;
  po.self = id;
  po.group = group_;
  if (plan.data_faults) po.faults = plan.data_text_for(uint64_t(id));
  auto endpoint = transport::make_plane(plan.empty() ? "inproc" : "faulty:inproc", po);
  if (!endpoint.is_ok()) return engine_status(endpoint.error());
  auto node = instance_node::start(*system_, weights_, o, endpoint.value(), gmanager());
  if (node.is_ok()) {
    std::lock_guard lock(nodes_mutex_);
    if (planes_.size() <= id) planes_.resize(size_t(id) + 1);
    planes_[id] = endpoint.value();
  }
  return node;
}

gpu::result<instance_id> cluster::add_instance() {
  instance_id id = 0;
  {
    std::lock_guard lock(nodes_mutex_);
    id = instance_id(nodes_.size());
  }
  if (id >= instance_id(max_instances))
    return gpu::status{gpu::status_code::invalid_argument, fmt::format("a cluster has at most {} instances", max_instances)};
  auto node = make_node(id);
  if (!node.is_ok()) return node.error();
  {
    std::lock_guard lock(nodes_mutex_);
    nodes_.push_back(std::move(node).value());
    killed_.push_back(false);
  }
  size_t alive = 0;
  for (instance_node* n : nodes()) alive += !killed(n->id());
  if (!wait_members(alive)) return gpu::status{gpu::status_code::internal, "the new instance did not join the gManager"};
  return id;
}

bool cluster::partition_instance(instance_id id, std::chrono::milliseconds duration) {
  std::lock_guard lock(nodes_mutex_);
  if (id >= nodes_.size() || killed_[id]) return false;
  std::vector<transport::peer_id> others;
  for (const auto& n : nodes_)
    if (n->id() != id) others.push_back(transport::peer_id(n->id()));
  for (const auto& plane : planes_) {
    auto* faulty = dynamic_cast<transport::faulty_plane*>(plane.get());
    if (!faulty) return false;
    if (plane->self() == id) faulty->partition_for(others, duration);
    else faulty->partition_for({transport::peer_id(id)}, duration);
  }
  return true;
}

std::vector<instance_node*> cluster::nodes() const {
  std::lock_guard lock(nodes_mutex_);
  std::vector<instance_node*> out;
  for (const auto& n : nodes_) out.push_back(n.get());
  return out;
}

bool cluster::killed(instance_id id) const {
  std::lock_guard lock(nodes_mutex_);
  return id < killed_.size() && killed_[id];
}

void cluster::after_crash(std::function<void()> rest) {
  std::lock_guard lock(crash_mutex_);
  if (!stopped_) crash_threads_.emplace_back(std::move(rest));
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

std::optional<cluster_status> cluster::status() { return ask_status(*system_, gmanager()); }

std::optional<uint64_t> cluster::reset_prefix_cache() {
  uint64_t freed = 0;
  for (instance_node* n : nodes())
    if (!killed(n->id())) freed += n->flush_prefix_cache();
  return freed;
}

int cluster::size() const {
  std::lock_guard lock(nodes_mutex_);
  return int(nodes_.size());
}

faults::fault_counts cluster::faults_injected() const {
  faults::fault_counts out = control_faults_ ? control_faults_->injected() : faults::fault_counts{};
  for (instance_node* n : nodes())
    for (const auto& [kind, count] : n->plane().faults_injected()) out[kind] += count;
  return out;
}

prefix_hits cluster::cached_prefix(const generate_params& params) {
  return cached_prefix_of(*system_, gmanager(), view(), params);
}

request_id cluster::submit(const generate_params& params, request_callbacks callbacks, const cluster_view& view) {
  const request_id id = next_request_++;
  std::optional<prefix_holders> prefix = look_up_prefix(*system_, gmanager(), view, params);
  instance_node* first = nodes().front();
  auto choose = [&](const routed_blocks& routed) {
    const instance_view* target = route_request(view, params, prefix, routed);
    return target ? serving_instance{target->instance, target->inst_id} : serving_instance{first->instance(), first->id()};
  };
  requests_.spawn(*system_, id, params, choose, std::move(callbacks), view, prefix);
  return id;
}

std::vector<instance_report> cluster::instances() const {
  std::vector<instance_report> out;
  for (instance_node* n : nodes())
    out.push_back({n->id(), n->pool().total_blocks(), n->pool().free_blocks(), n->pool().check(), n->plane().counters(),
                   !killed(n->id()), n->hosted_count(), n->promised_count(), n->pool().spare_blocks(gpu::spare_user::replicas),
                   n->landing_taken()});
  return out;
}

instance_node* cluster::mark_gone(instance_id id) {
  std::lock_guard lock(nodes_mutex_);
  if (id >= nodes_.size() || killed_[id]) return nullptr;
  killed_[id] = true;
  return nodes_[id].get();
}

bool cluster::stop_instance(instance_id id) {
  instance_node* node = mark_gone(id);
  if (node) node->stop();
  return node != nullptr;
}

void cluster::announce_death(instance_id id) {
  for (instance_node* n : nodes())
    if (!killed(n->id())) n->peer_failed(id, "instance " + std::to_string(id) + " was killed");
  cluster_view v;
  for (int i = 0; i < 500; ++i) {  // the gManager hears of it from its monitor on the rManager
    v = view();
    if (!v.has_member(id)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  requests_.tell_view(v);
}

bool cluster::hang_instance(instance_id id) {
  instance_node* node = mark_gone(id);
  if (node) node->hang();
  return node != nullptr;
}

bool cluster::kill_instance(instance_id id) {
  if (!stop_instance(id)) return false;
  announce_death(id);
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
  for (instance_node* n : nodes())
    if (!killed(n->id())) caf::anon_send(n->rmanager(), use_gmanager{fresh});
}

void cluster::drain_instance(instance_id id) { caf::anon_send(gmanager(), actors::drain_instance{id}); }

bool cluster::wait_pools_free(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto pools = instances();
    if (std::all_of(pools.begin(), pools.end(),
                    [](const auto& i) {
                      return !i.alive || (i.free_blocks == i.total_blocks && i.replica_blocks == 0 &&
                                          i.hosted_blocks == 0 && i.promised_blocks == 0 && i.landing_taken == 0);
                    }))
      return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void cluster::shutdown() {
  if (stopped_ || !system_) return;
  std::vector<std::thread> crashes;
  {
    std::lock_guard lock(crash_mutex_);
    stopped_ = true;
    crashes.swap(crash_threads_);
  }
  for (std::thread& t : crashes) t.join();
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
