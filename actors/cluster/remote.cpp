#include "actors/cluster/remote.hpp"

#include "actors/faults/hang.hpp"

#include <thread>

#include "actors/attention_server.hpp"
#include "actors/instance/instance.hpp"
#include "actors/logic/remote_router.hpp"
#include "actors/logic/status_bridge.hpp"
#include "actors/rmanager/rmanager.hpp"
#include "actors/worker.hpp"
#include "gpu/backend_registry.hpp"
#include "gpu/batcher.hpp"
#include "gpu/engine.hpp"

namespace illm::actors {

struct instance_node::parts {
  instance_id id = 0;
  std::shared_ptr<gpu::backend> device, attention_device, decode_attention_device, move_device;
  std::shared_ptr<gpu::engine> engine;
  std::shared_ptr<gpu::kv_pool> pool;
  std::shared_ptr<gpu::prefix_cache> prefix_cache;  // none: --prefix-cache off
  gpu::block_key prefix_root;                       // what its keys chain from: the model, its weight and KV types
  gpu::kv_identity kv;                              // its pool's KV: the model's fingerprint and the KV type
  std::shared_ptr<gpu::kv_landing> landing;  // where moves into a device pool land (none for a host pool)
  std::shared_ptr<gpu::local_device_pools> local_pools;  // where its device pool is listed (none: not listed)
  std::shared_ptr<transport::data_plane> plane;
  std::shared_ptr<remote_router> router;
  std::shared_ptr<event_log> events;
  std::shared_ptr<actors::hosted_blocks> hosted;
  std::shared_ptr<pool_promises> promises;
  rmanager_actor rmanager;
  caf::actor worker;
  instance_actor instance;
  attention_servers attention;
};

namespace {

template <class T>
std::shared_ptr<T> to_shared(std::unique_ptr<T> p) {
  return std::shared_ptr<T>(std::move(p));
}

/// Registers the memory that moves into this instance land in with its data plane: the pool when it is host
/// memory, else a landing arena of host blocks made for it.
gpu::result<transport::remote_region> register_landing(transport::data_plane& plane, const gpu::kv_pool& pool,
                                                        const std::shared_ptr<gpu::backend>& move_device,
                                                        const instance_settings& settings,
                                                        std::shared_ptr<gpu::kv_landing>& landing) {
  const uint64_t block_bytes = pool.layout().block_bytes();
  void* base = pool.base();
  uint64_t bytes = uint64_t(pool.total_blocks()) * block_bytes;
  if (!move_device->host_memory()) {
    const int slots = settings.landing_blocks > 0 ? settings.landing_blocks : settings.kv_blocks_per_instance;
    auto made = gpu::kv_landing::create(move_device, block_bytes, uint32_t(slots));
    if (!made.is_ok()) return made.error();
    landing = to_shared(std::move(made).value());
    base = landing->base();
    bytes = landing->bytes();
  }
  auto region = plane.register_memory(base, bytes);
  if (!region.is_ok()) return engine_status(region.error());
  return region.value();
}

}  // namespace

instance_node::instance_node(std::unique_ptr<parts> p) : p_(std::move(p)) {}

instance_node::~instance_node() { stop(); }

gpu::result<std::unique_ptr<instance_node>> instance_node::start(caf::actor_system& sys,
                                                                 std::shared_ptr<const gpu::model_weights> weights,
                                                                 const instance_node_options& options,
                                                                 std::shared_ptr<transport::data_plane> plane,
                                                                 gmanager_actor gmanager) {
  if (options.instance.kv_blocks_per_instance < 2) return gpu::status{gpu::status_code::invalid_argument, "an instance needs at least 2 KV blocks"};
  auto n = std::make_unique<parts>();
  n->id = options.id;
  n->plane = std::move(plane);
  n->events = options.events ? options.events : std::make_shared<event_log>();
  const gpu::model_config& mc = weights->config();
  const gpu::attention_shape shape = mc.attention();
  const int threads = options.instance.threads_per_instance > 0 ? options.instance.threads_per_instance : std::max(1, int(std::thread::hardware_concurrency()));
  const std::optional<std::string> named = instance_backend_name(options.instance, options.id);
  if (!named)
    return gpu::status{gpu::status_code::invalid_argument,
                       "devices '" + options.instance.devices + "': a list of GPU indexes such as 0,1"};
  const std::string& backend = *named;
  auto device = gpu::make_backend(backend, threads);
  if (!device.is_ok()) return device.error();
  // The attention servers and the rManager's moves each run on a backend of their own (own stream on a GPU).
  auto attention_device = gpu::make_backend(backend, 1), decode_attention_device = gpu::make_backend(backend, 1);
  auto move_device = gpu::make_backend(backend, 1);
  for (auto* made : {&attention_device, &decode_attention_device, &move_device})
    if (!made->is_ok()) return made->error();
  n->device = to_shared(std::move(device).value());
  n->attention_device = to_shared(std::move(attention_device).value());
  n->decode_attention_device = to_shared(std::move(decode_attention_device).value());
  n->move_device = to_shared(std::move(move_device).value());
  gpu::engine_options engine_options{options.batch.max_batch_tokens, options.batch.max_batch_seqs};
  engine_options.overlap_min_tokens = options.batch.overlap_min_tokens;
  engine_options.max_scored_tokens = gpu::batcher_options{}.max_scored_tokens;  // prompt log probabilities
  engine_options.kv_type = gpu::parse_dtype(options.instance.kv_type).value_or(gpu::dtype::f32);
  auto placed = options.weights_on_devices ? options.weights_on_devices->on(weights, backend)
                                           : gpu::device_weights::place(weights, n->device);
  if (!placed.is_ok()) return placed.error();
  auto eng = gpu::engine::create(std::move(placed).value(), *n->device, engine_options);
  if (!eng.is_ok()) return eng.error();
  n->engine = to_shared(std::move(eng).value());
  auto pool = gpu::kv_pool::create(*n->device, n->engine->pool_layout(), uint32_t(options.instance.kv_blocks_per_instance));
  if (!pool.is_ok()) return pool.error();
  n->pool = std::make_shared<gpu::kv_pool>(std::move(pool).value());
  if (options.instance.prefix_cache != "off") n->prefix_cache = gpu::prefix_cache::over(n->pool, n->id);
  n->prefix_root = gpu::root_key(gpu::model_identity(*weights, engine_options.kv_type), "");
  n->kv = gpu::kv_identity_of(*weights, engine_options.kv_type);
  auto region = register_landing(*n->plane, *n->pool, n->move_device, options.instance, n->landing);
  if (!region.is_ok()) return region.error();

  metrics::histogram* latency =
      options.metrics ? &options.metrics->remote_attention_latency.with({std::to_string(n->id)}) : nullptr;
  auto nodes = std::make_shared<peer_nodes>();
  n->router = std::make_shared<remote_router>(n->plane, mc.n_heads, mc.head_dim(), std::chrono::milliseconds(options.instance.attention_timeout_ms), latency,
                                              nodes);
  auto hosted = std::make_shared<actors::hosted_blocks>();
  attention_server_config acfg{n->pool, hosted, n->attention_device, shape, mc.n_layers, n->plane};
  acfg.metrics = options.metrics;
  acfg.max_waiting_per_peer = size_t(options.instance.peer_max_waiting_attends);
  n->attention = spawn_attention_servers(sys, acfg, n->decode_attention_device);
  const attention_servers servers = n->attention;
  attention_server_actor server = servers.prefill;  // the one that relays
  // Only members' messages are served: what a sender outside the view sends is dropped and counted.
  metrics::counter* dropped =
      options.metrics ? &options.metrics->plane_messages_dropped.with({std::to_string(n->id)}) : nullptr;
  auto from_member = [nodes, dropped](transport::peer_id from) {
    if (nodes->member(uint32_t(from))) return true;
    if (dropped) dropped->add();
    return false;
  };
  n->plane->on_message(transport::channel::attend, [servers, from_member](transport::peer_id from,
                                                                          std::vector<uint8_t> bytes) {
    if (from_member(from)) servers.accept(instance_id(from), std::move(bytes));
  });
  std::weak_ptr<remote_router> router = n->router;
  n->plane->on_message(transport::channel::partials, [router, server, from_member](transport::peer_id from,
                                                                                   std::vector<uint8_t> bytes) {
    if (!from_member(from)) return;
    if (const auto tag = partials_tag(bytes); tag && (*tag & relay_tag_bit))  // answers to what this one relays
      return caf::anon_send(server, incoming_partials{from, std::move(bytes)});
    if (auto r = router.lock()) r->on_partials(from, std::move(bytes));
  });

  rmanager_config rcfg;
  rcfg.id = n->id;
  rcfg.pool = n->pool;
  rcfg.prefix_cache = n->prefix_cache;
  rcfg.prefix_root = n->prefix_root;
  rcfg.kv = n->kv;
  rcfg.shared_prefixes = options.instance.prefix_cache == "cluster";
  rcfg.prefix_copy = options.instance.prefix_copy;
  rcfg.hosted = n->hosted = hosted;
  rcfg.promises = n->promises = std::make_shared<pool_promises>();
  rcfg.plane = n->plane;
  rcfg.region = region.value();
  rcfg.landing = n->landing;
  rcfg.move_device = n->move_device;
  if (!n->move_device->host_memory()) {
    auto staging = gpu::outgoing_staging::create(n->move_device, n->pool->layout().block_bytes(),
                                                 uint32_t(options.instance.staging_chunk_blocks));
    if (!staging.is_ok()) return staging.error();
    rcfg.staging = std::move(staging).value();
  }
  if (options.local_pools && !n->device->host_memory()) {
    n->local_pools = options.local_pools;
    n->local_pools->add(n->id, {n->pool, gpu::cuda_device_of(backend).value_or(0)});
    rcfg.local_pools = n->local_pools;
  }
  rcfg.gmanager = std::move(gmanager);
  rcfg.events = n->events;
  rcfg.heartbeat_period = std::chrono::milliseconds(options.instance.heartbeat_ms);
  rcfg.answer_timeout = std::chrono::milliseconds(options.instance.answer_timeout_ms);
  rcfg.lease = std::chrono::milliseconds(options.instance.lease_ms);
  rcfg.replica_min_tokens = uint32_t(options.instance.replica_min_tokens);
  rcfg.orphan_lease = std::chrono::milliseconds(options.instance.orphan_lease_ms);
  rcfg.peer_max_blocks = uint32_t(options.instance.peer_max_blocks);
  rcfg.peer_max_open_moves = uint32_t(options.instance.peer_max_open_moves);
  rcfg.metrics = options.metrics;
  rcfg.plane_address = options.plane_address;
  rcfg.node = options.node;
  rcfg.nodes = nodes;
  rcfg.connect_peer = options.connect_peer;
  rcfg.control = options.control;
  rcfg.on_view = options.on_view;
  rcfg.faults = options.faults;
  rcfg.crash = options.crash;
  rcfg.log = options.log;
  n->rmanager = spawn_rmanager(sys, rcfg);

  worker_config wcfg;
  wcfg.engine = n->engine;
  wcfg.pools.by_id.assign(size_t(n->id) + 1, nullptr);
  wcfg.pools.by_id[n->id] = n->pool.get();
  wcfg.pools.local = n->id;
  wcfg.router = n->router;
  wcfg.local_pool = n->pool;
  n->worker = spawn_worker(sys, wcfg, true);

  instance_config icfg;
  icfg.id = n->id;
  icfg.pool = n->pool;
  icfg.worker = n->worker;
  icfg.rmanager = n->rmanager;
  icfg.promises = rcfg.promises;
  icfg.batch = options.batch;
  icfg.metrics = options.metrics;
  icfg.tap = options.tap;
  icfg.plant = options.plant;
  icfg.constraints = options.constraints;
  icfg.prefix_cache = n->prefix_cache;
  icfg.prefix_root = n->prefix_root;
  icfg.shared_prefixes = options.instance.prefix_cache == "cluster";
  n->instance = spawn_instance(sys, icfg);
  caf::anon_send(n->rmanager, attach_atom::value, n->instance);
  return std::unique_ptr<instance_node>(new instance_node(std::move(n)));
}

instance_id instance_node::id() const { return p_->id; }
rmanager_actor instance_node::rmanager() const { return p_->rmanager; }
instance_actor instance_node::instance() const { return p_->instance; }
const gpu::kv_pool& instance_node::pool() const { return *p_->pool; }
uint32_t instance_node::flush_prefix_cache() { return p_->prefix_cache ? p_->prefix_cache->flush() : 0; }
const transport::data_plane& instance_node::plane() const { return *p_->plane; }
uint32_t instance_node::hosted_count() const { return p_->hosted->count(); }
uint32_t instance_node::promised_count() const { return p_->promises->rooms_total(); }
uint32_t instance_node::landing_taken() const {
  return p_->landing ? p_->landing->total_slots() - p_->landing->free_slots() : 0;
}

std::vector<caf::actor_addr> instance_node::actors() const {
  return {p_->instance.address(), p_->worker.address(), p_->attention.decode.address(),
          p_->attention.prefill.address(), p_->rmanager.address()};
}

void instance_node::peer_failed(instance_id peer, const std::string& why) {
  if (!p_ || !p_->rmanager) return;
  p_->router->peer_failed(transport::peer_id(peer), why);
  caf::anon_send(p_->rmanager, actors::peer_failed{peer, why});
}

void instance_node::hang() {
  if (!p_ || !p_->rmanager) return;
  for (const caf::actor_addr& a : actors()) faults::tell_to_hang(a);
}

void instance_node::stop() {
  if (!p_ || !p_->rmanager) return;
  if (p_->local_pools) p_->local_pools->remove(p_->id);
  p_->plane->on_message(transport::channel::attend, nullptr);
  p_->plane->on_message(transport::channel::partials, nullptr);
  for (const caf::actor_addr& a : actors()) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  // Detached actors' threads end only when the last handle to their actor is gone.
  p_->instance = instance_actor{};
  p_->worker = caf::actor{};
  p_->attention = attention_servers{};
  p_->rmanager = rmanager_actor{};
}

}  // namespace illm::actors
