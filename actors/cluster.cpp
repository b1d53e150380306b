#include "actors/cluster.hpp"

#include <thread>

#include <fmt/format.h>

#include "actors/attention_server.hpp"
#include "actors/gmanager.hpp"
#include "actors/instance.hpp"
#include "actors/placement/simple_policy.hpp"
#include "actors/remote_router.hpp"
#include "actors/rmanager.hpp"
#include "actors/worker.hpp"
#include "gpu/backend_registry.hpp"
#include "gpu/engine.hpp"
#include "transport/inproc/inproc.hpp"

namespace illm::actors {

/// One instance's resources and actors.
struct cluster::node {
  instance_id id = 0;
  std::shared_ptr<gpu::backend> device, attention_device;
  std::shared_ptr<gpu::engine> engine;
  std::shared_ptr<gpu::kv_pool> pool;
  std::shared_ptr<transport::inproc_endpoint> endpoint;
  std::shared_ptr<remote_router> router;
  caf::actor rmanager, attention_server, worker, instance;
};

cluster::cluster() : events_(std::make_shared<event_log>()) {}

cluster::~cluster() { shutdown(); }

namespace {

int threads_for(const cluster_options& o) {
  if (o.threads_per_instance > 0) return o.threads_per_instance;
  return std::max(1, int(std::thread::hardware_concurrency()) / std::max(1, o.instances));
}

template <class T>
std::shared_ptr<T> to_shared(std::unique_ptr<T> p) {
  return std::shared_ptr<T>(std::move(p));
}

}  // namespace

gpu::result<std::unique_ptr<cluster>> cluster::start(std::shared_ptr<const gpu::model_weights> weights,
                                                     const cluster_options& options) {
  if (options.instances < 1 || options.instances > 64)
    return gpu::status{gpu::status_code::invalid_argument,
                       fmt::format("--instances {} is outside 1..64", options.instances)};
  if (options.kv_blocks_per_instance < 2)
    return gpu::status{gpu::status_code::invalid_argument, "an instance needs at least 2 KV blocks"};
  std::unique_ptr<cluster> c(new cluster());
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
  system_ = std::make_unique<caf::actor_system>(*config_);
  gmanager_config gcfg;
  gcfg.policy_period = options.policy_period;
  gcfg.policy = options.policy ? options.policy : placement::policy(placement::simple_policy);
  gcfg.heartbeat_timeout = std::max(options.heartbeat_period * 20, std::chrono::milliseconds(1000));
  gcfg.metrics = options.metrics;
  gmanager_ = spawn_gmanager(*system_, gcfg);

  auto fabric = std::make_shared<transport::inproc_fabric>();
  const gpu::model_config& mc = weights->config();
  const gpu::attention_shape shape{mc.n_heads, mc.n_kv_heads, mc.head_dim()};
  for (int i = 0; i < options.instances; ++i) {
    auto n = std::make_unique<node>();
    n->id = instance_id(i);
    auto device = gpu::make_backend("cpu", threads_for(options));
    auto attention_device = gpu::make_backend("cpu", 1);
    if (!device.is_ok()) return device.error();
    if (!attention_device.is_ok()) return attention_device.error();
    n->device = to_shared(std::move(device).value());
    n->attention_device = to_shared(std::move(attention_device).value());
    auto eng = gpu::engine::create(weights, *n->device, {options.max_batch_tokens, options.max_batch_seqs});
    if (!eng.is_ok()) return eng.error();
    n->engine = to_shared(std::move(eng).value());
    auto pool = gpu::kv_pool::create(*n->device, n->engine->pool_layout(), options.kv_blocks_per_instance);
    if (!pool.is_ok()) return pool.error();
    n->pool = std::make_shared<gpu::kv_pool>(std::move(pool).value());
    auto endpoint = fabric->connect(n->id);
    if (!endpoint.is_ok()) return endpoint.error();
    n->endpoint = endpoint.value();
    auto region = n->endpoint->register_memory(n->pool->base(),
                                               uint64_t(n->pool->total_blocks()) * n->pool->layout().block_bytes());
    if (!region.is_ok()) return region.error();

    metrics::histogram* latency =
        options.metrics ? &options.metrics->remote_attention_latency.with({std::to_string(n->id)}) : nullptr;
    n->router =
        std::make_shared<remote_router>(n->endpoint, mc.n_heads, mc.head_dim(), options.attention_timeout, latency);
    auto hosted = std::make_shared<hosted_blocks>();
    n->attention_server =
        spawn_attention_server(*system_, {n->pool, hosted, n->attention_device, shape, mc.n_layers, n->endpoint});
    caf::actor server = n->attention_server;
    n->endpoint->on_message(transport::channel::attend, [server](transport::peer_id from, std::vector<uint8_t> bytes) {
      caf::anon_send(server, incoming_attend{from, std::move(bytes)});
    });
    std::weak_ptr<remote_router> router = n->router;
    n->endpoint->on_message(transport::channel::partials, [router](transport::peer_id from, std::vector<uint8_t> bytes) {
      if (auto r = router.lock()) r->on_partials(from, std::move(bytes));
    });

    rmanager_config rcfg;
    rcfg.id = n->id;
    rcfg.pool = n->pool;
    rcfg.hosted = hosted;
    rcfg.plane = n->endpoint;
    rcfg.region = region.value();
    rcfg.gmanager = gmanager_;
    rcfg.events = events_;
    rcfg.heartbeat_period = options.heartbeat_period;
    rcfg.lease = options.lease;
    rcfg.metrics = options.metrics;
    n->rmanager = spawn_rmanager(*system_, rcfg);

    worker_config wcfg;
    wcfg.engine = n->engine;
    wcfg.pools.by_id.assign(size_t(n->id) + 1, nullptr);
    wcfg.pools.by_id[n->id] = n->pool.get();
    wcfg.pools.local = n->id;
    wcfg.router = n->router;
    wcfg.local_pool = n->pool;
    n->worker = spawn_worker(*system_, wcfg, true);

    instance_config icfg;
    icfg.id = n->id;
    icfg.pool = n->pool;
    icfg.worker = n->worker;
    icfg.rmanager = n->rmanager;
    icfg.max_batch_tokens = options.max_batch_tokens;
    icfg.max_batch_seqs = options.max_batch_seqs;
    icfg.metrics = options.metrics;
    n->instance = spawn_instance(*system_, icfg);
    caf::anon_send(n->rmanager, attach_atom::value, n->instance);
    nodes_.push_back(std::move(n));
  }
  return gpu::status::ok();
}

cluster_view cluster::view() {
  cluster_view out;
  caf::scoped_actor s{*system_};
  s->request(gmanager_, std::chrono::seconds(5), view_atom::value)
      .receive([&](cluster_view& v) { out = std::move(v); }, [&](const caf::error&) {});
  return out;
}

int cluster::size() const { return int(nodes_.size()); }

request_id cluster::submit(const generate_params& params, request_callbacks callbacks) {
  const request_id id = next_request_++;
  const cluster_view v = view();
  caf::actor target = nodes_.front()->instance;
  uint32_t best = 0;
  for (const instance_view& i : v.instances)  // the instance with the most free blocks
    if (!i.draining && i.instance && i.free_blocks > best) {
      best = i.free_blocks;
      target = i.instance;
    }
  generate_request r{id, params.prompt, params.max_tokens, params.temperature, params.top_p, params.seed,
                     params.ignore_eos, {}};
  auto on_finished = std::move(callbacks.on_finished);
  callbacks.on_finished = [this, id, on_finished](const request_finished& f) {
    {
      std::lock_guard lock(requests_mutex_);
      requests_.erase(id);
    }
    if (on_finished) on_finished(f);
  };
  std::lock_guard lock(requests_mutex_);
  requests_[id] = spawn_request(*system_, std::move(r), target, std::move(callbacks));
  return id;
}

void cluster::cancel(request_id id) {
  std::lock_guard lock(requests_mutex_);
  if (auto it = requests_.find(id); it != requests_.end()) caf::anon_send(it->second, cancel_request{id});
}

void cluster::cancel_all() {
  std::lock_guard lock(requests_mutex_);
  for (auto& [id, r] : requests_) caf::anon_send(r, cancel_request{id});
}

std::vector<instance_report> cluster::instances() const {
  std::vector<instance_report> out;
  for (const auto& n : nodes_)
    out.push_back({n->id, n->pool->total_blocks(), n->pool->free_blocks(), n->pool->check(), n->endpoint->counters()});
  return out;
}

bool cluster::wait_pools_free(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto pools = instances();
    if (std::all_of(pools.begin(), pools.end(), [](const auto& i) { return i.free_blocks == i.total_blocks; }))
      return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void cluster::shutdown() {
  if (stopped_ || !system_) return;
  stopped_ = true;
  {
    std::lock_guard lock(requests_mutex_);
    for (auto& [id, r] : requests_) caf::anon_send(r, cancel_request{id});
  }
  for (const auto& n : nodes_)
    for (const caf::actor& a : {n->instance, n->worker, n->attention_server, n->rmanager})
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(gmanager_, caf::exit_reason::user_shutdown);
  {
    std::lock_guard lock(requests_mutex_);
    for (auto& [id, r] : requests_) caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
  }
  system_->await_all_actors_done();
  // Detached actors' threads end only when the last handle to their actor is gone.
  for (const auto& n : nodes_) {
    n->endpoint->on_message(transport::channel::attend, nullptr);
    n->instance = n->worker = n->attention_server = n->rmanager = caf::actor{};
  }
  gmanager_ = caf::actor{};
  {
    std::lock_guard lock(requests_mutex_);
    requests_.clear();
  }
  system_.reset();
}

}  // namespace illm::actors
