#include "actors/sim/simulation.hpp"

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <list>
#include <map>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "actors/event_log.hpp"
#include "actors/gmanager.hpp"
#include "actors/instance/instance.hpp"
#include "actors/logic/hosted_blocks.hpp"
#include "actors/logic/pool_promises.hpp"
#include "actors/logic/status_bridge.hpp"
#include "actors/metrics/runtime_metrics.hpp"
#include "actors/rmanager/rmanager.hpp"
#include "actors/sim/driver.hpp"
#include "actors/sim/failures.hpp"
#include "actors/sim/sim_worker.hpp"
#include "gpu/kv_pool.hpp"
#include "gpu/model_config.hpp"
#include "gpu/sim/sim_backend.hpp"
#include "transport/registry.hpp"

namespace illm::actors::sim {

/// A put's completion, due when its bytes have arrived.
struct put_arrived {
  std::shared_ptr<transport::completion> done;
};

}  // namespace illm::actors::sim

// A put's completion stays in the simulator's process.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(illm::actors::sim::put_arrived)

namespace illm::actors::sim {

std::vector<std::string> policy_names() {
  return {"infinite", "passive", "static-multi", "static-single"};
}
std::vector<std::string> routing_names() {
  return {"least-requests", "least-prompt-tokens", "least-tokens", "round-robin", "prefix-aware"};
}

namespace {

caf::behavior put_clock(caf::event_based_actor*) {
  return {[](const put_arrived& p) { (*p.done)(transport::status::ok()); }};
}

/// Every actor of a run, held until the run ends and then stopped.
class run_actors {
 public:
  template <class Handle>
  void add(Handle h) {
    stops_.push_back([h] { caf::anon_send_exit(h, caf::exit_reason::user_shutdown); });
  }
  void stop() {
    for (auto& s : stops_) s();
  }

 private:
  std::vector<std::function<void()>> stops_;
};

/// How long the moves' puts take: each source sends its puts one after another over its NVLink or its NIC,
/// at the links' bandwidth (none when the profile has no links: at once).
transport::put_timer timed_puts(caf::actor_system& sys, caf::scheduler::test_coordinator& sched,
                                const link_model& links, int n_instances, run_actors& everyone) {
  if (!(links.node_bytes_per_s > 0) && !(links.network_bytes_per_s > 0)) return nullptr;
  caf::actor clock = sys.spawn(put_clock);
  everyone.add(clock);
  // Per source: when its NVLink and its NIC are done with the puts given them so far.
  auto free = std::make_shared<std::vector<std::pair<double, double>>>(size_t(n_instances), std::pair{0.0, 0.0});
  return [clock, free, links, &sched](transport::peer_id from, transport::peer_id to, uint64_t bytes,
                                      transport::completion done) {
    const double now = std::chrono::duration<double>(sched.clock().now().time_since_epoch()).count();
    auto& [near, far] = (*free)[from % free->size()];
    double& link = links.same_node(from, to) ? near : far;
    link = std::max(link, now) + links.seconds(from, to, double(bytes));
    caf::delayed_anon_send(clock, std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(link - now)),
                           put_arrived{std::make_shared<transport::completion>(std::move(done))});
  };
}

/// What a policy simulates: one instance's profile, the instances, and how many times the fewest GPUs the
/// model needs an instance has (its batches grow as much).
struct chosen_profile {
  placement::profile model;
  int instances = 0;
  int scale = 1;
};

/// The roofline profile of a policy's instances (tensor parallel over their GPUs), or the given one.
gpu::result<chosen_profile> profile_for(const sim_options& o) {
  const bool single = o.policy == "static-single";
  if (o.profile) {
    if (o.gpus_per_instance)
      return gpu::status{gpu::status_code::invalid_argument, "a measured profile fixes the GPUs of an instance"};
    return chosen_profile{*o.profile, single ? 1 : o.instances, single ? o.instances : 1};
  }
  auto one = placement::roofline_profile(o.gpu, o.model);
  if (!one.is_ok()) return one.error();
  const int fewest = one->gpus, gpus = o.gpus_per_instance ? o.gpus_per_instance : fewest;
  if (gpus < fewest)
    return gpu::status{gpu::status_code::invalid_argument,
                       fmt::format("{} needs at least {} {} per instance", o.model, fewest, o.gpu)};
  const int instances = single ? 1 : o.instances, per_instance = single ? gpus * o.instances : gpus;
  if (per_instance == fewest) return chosen_profile{one.value(), instances, 1};
  auto tp = placement::tensor_parallel_profile(o.gpu, o.model, per_instance);
  if (!tp.is_ok()) return tp.error();
  return chosen_profile{tp.value(), instances, per_instance / fewest};
}

percentiles percentiles_of(std::vector<double> v) {
  return {frontend::percentile(v, 50), frontend::percentile(v, 90), frontend::percentile(v, 99)};
}

uint64_t total_steps(const std::vector<std::shared_ptr<sim_worker_stats>>& stats) {
  uint64_t n = 0;
  for (const auto& s : stats) n += s->steps;
  return n;
}

/// Time-weighted means over the run of the pools' blocks in use and of their free blocks promised (to the
/// running requests as they grow, and to rooms): memory spoken for but holding no KV yet.
class kv_meter {
 public:
  kv_meter(std::vector<std::shared_ptr<gpu::kv_pool>> pools, std::vector<std::shared_ptr<pool_promises>> promises)
      : pools_(std::move(pools)), promises_(std::move(promises)) {}

  /// The pools at simulated second `t`; they stay so until the next sample.
  void sample(double t) {
    used_s_ += used_ * (t - last_t_);
    promised_s_ += promised_ * (t - last_t_);
    last_t_ = t;
    uint64_t used = 0, promised = 0, total = 0;
    for (size_t i = 0; i < pools_.size(); ++i) {
      const uint32_t free = pools_[i]->free_blocks();
      used += pools_[i]->used_blocks();
      total += pools_[i]->total_blocks();
      promised += std::min<uint64_t>(free, uint64_t(promises_[i]->running()) + promises_[i]->rooms_total());
    }
    used_ = total ? double(used) / double(total) : 0;
    promised_ = total ? double(promised) / double(total) : 0;
  }
  /// Blocks in use over all blocks at the last sample.
  double used_now() const { return used_; }
  /// Free blocks promised over all blocks at the last sample.
  double promised_now() const { return promised_; }
  /// Blocks in use over all blocks, mean from the first sample to the last.
  double used_fraction() const { return last_t_ > 0 ? used_s_ / last_t_ : 0; }
  /// Free blocks promised over all blocks, mean from the first sample to the last.
  double promised_fraction() const { return last_t_ > 0 ? promised_s_ / last_t_ : 0; }

 private:
  std::vector<std::shared_ptr<gpu::kv_pool>> pools_;
  std::vector<std::shared_ptr<pool_promises>> promises_;
  double used_s_ = 0, promised_s_ = 0, last_t_ = 0, used_ = 0, promised_ = 0;
};

/// The run period by period (timeline_row): the workers' step and hosting time since the last row, the KV
/// meter's last sample and the driver's counts.
class timeline_meter {
 public:
  timeline_meter(double period_s, std::vector<std::shared_ptr<sim_worker_stats>> stats)
      : period_s_(period_s), stats_(std::move(stats)), seen_(stats_.size()) {}

  /// Adds a row at simulated second `t` when it has passed the current period's end, or `last`.
  void sample(double t, const kv_meter& kv, const driver_record& record, bool last) {
    if (period_s_ <= 0 || t <= last_t_ || (t < last_t_ + period_s_ && !last)) return;
    timeline_row row{t, 0, 0, 0, kv.used_now(), kv.promised_now(), 0, record.finished};
    for (size_t i = 0; i < stats_.size(); ++i) {
      const double busy = stats_[i]->busy_s - seen_[i].busy_s, hosted = stats_[i]->hosted_s - seen_[i].hosted_s;
      row.stepping += stats_[i]->steps > seen_[i].steps ? 1 : 0;
      row.busy_fraction += busy;
      row.hosted_fraction += hosted;
      seen_[i] = *stats_[i];
    }
    const double gpu_s = (t - last_t_) * double(stats_.size());
    row.busy_fraction /= gpu_s;
    row.hosted_fraction /= gpu_s;
    for (const tracked& q : record.requests) row.started += q.started ? 1 : 0;
    rows_.push_back(row);
    last_t_ = t;
  }
  const std::vector<timeline_row>& rows() const { return rows_; }

 private:
  double period_s_, last_t_ = 0;
  std::vector<std::shared_ptr<sim_worker_stats>> stats_;
  std::vector<sim_worker_stats> seen_;
  std::vector<timeline_row> rows_;
};

/// Seconds no schedule can finish the completed requests' work in on `instances` instances of `model`: each
/// token's dense layers at the cheapest batch of at most `max_tokens`, each prompt's causal (query, key) pairs
/// and each answer token's KV reads at the attention rates, the sum spread evenly over the instances.
double work_bound_s(const placement::profile& model, const std::vector<tracked>& requests, int max_tokens,
                    int instances) {
  const double dense_per_token = placement::cheapest_dense_per_token(model, max_tokens);
  double seconds = 0;
  for (const tracked& t : requests) {
    if (!t.done || t.end.reason == "error" || t.end.generated < 1) continue;
    const double p = t.input, decodes = t.end.generated - 1;  // the first answer token comes from the prefill
    const double pairs = p * (p + 1) / 2, kv_read = decodes * p + decodes * (decodes + 1) / 2;
    seconds += (p + decodes) * dense_per_token * model.n_layers + placement::attention_time(model, kv_read, pairs);
  }
  return seconds / instances;
}

void add_step_figures(sim_report& r, const std::vector<std::shared_ptr<sim_worker_stats>>& stats) {
  sim_worker_stats all;
  for (const auto& s : stats) {
    all.steps += s->steps;
    all.tokens += s->tokens;
    all.sampled += s->sampled;
    all.busy_s += s->busy_s;
    all.computing_s += s->computing_s;
    all.hosted_s += s->hosted_s;
  }
  r.batch_tokens = all.tokens;
  if (all.steps) {
    r.mean_step_tokens = double(all.tokens) / double(all.steps);
    r.mean_step_sampled = double(all.sampled) / double(all.steps);
  }
  if (r.makespan_s > 0 && !stats.empty()) {
    r.busy_fraction = all.busy_s / (r.makespan_s * double(stats.size()));
    r.computing_fraction = all.computing_s / (r.makespan_s * double(stats.size()));
    r.hosted_fraction = all.hosted_s / (r.makespan_s * double(stats.size()));
  }
}

/// A policy's profile and the model shape its pools are laid out for.
struct resolved_options {
  chosen_profile chosen;
  gpu::model_config shape;
};

/// What `o` simulates, or what is wrong with it: an unknown policy, a GPU or model without a profile, too
/// few GPUs per instance.
gpu::result<resolved_options> resolve(const sim_options& o) {
  const auto names = policy_names();
  if (std::find(names.begin(), names.end(), o.policy) == names.end())
    return gpu::status{gpu::status_code::invalid_argument,
                       fmt::format("unknown policy '{}' (known: {})", o.policy, fmt::join(names, ", "))};
  if (o.batch.mixed_step_tokens < 0 && o.batch.mixed_step_tokens != auto_mixed_step_tokens)
    return gpu::status{gpu::status_code::invalid_argument,
                       fmt::format("the mixed step tokens must be 0 or more ({})", o.batch.mixed_step_tokens)};
  if (o.batch.prefill_every_steps != 1)
    return gpu::status{gpu::status_code::invalid_argument,
                       "the simulator prefills in every step (--prefill-every-steps is the runtime's)"};
  if (!(o.kv_scale > 0) || !(o.timeline_period_s >= 0))
    return gpu::status{gpu::status_code::invalid_argument,
                       fmt::format("the KV scale must be above 0 ({}) and the timeline period not below 0 ({})",
                                   o.kv_scale, o.timeline_period_s)};
  auto chosen = profile_for(o);
  if (!chosen.is_ok()) return chosen.error();
  auto shape = gpu::preset_config(chosen->model.model);
  if (!shape.is_ok()) return shape.error();
  return resolved_options{chosen.value(), shape.value()};
}

}  // namespace

gpu::status check_options(const sim_options& o) {
  auto resolved = resolve(o);
  return resolved.is_ok() ? gpu::status::ok() : resolved.error();
}

namespace {

/// What every instance of a run is made from.
struct sim_setup {
  const sim_options& o;
  const placement::profile& model;
  int n_instances = 0;
  int batch_scale = 1;
  uint32_t blocks = 0;  ///< per pool
  gpu::kv_layout layout;
  step_layout steps;
  int step_tokens = 0;  ///< an instance over more GPUs (static-single's spans them all) steps larger batches
  int mixed_step_tokens = 0;
};

/// The instances of a run, what they report, and the actors to stop at its end.
struct sim_cluster {
  gpu::sim::sim_backend device;  ///< the pools' (first: it outlives them)
  std::vector<instance_actor> instances;
  std::vector<std::shared_ptr<gpu::kv_pool>> pools;
  std::vector<std::shared_ptr<gpu::prefix_cache>> caches;  ///< per instance (none with --prefix-cache off)
  gpu::block_key prefix_root = gpu::root_key("the simulator's model", "");
  std::vector<std::shared_ptr<sim_worker_stats>> stats;
  std::vector<std::shared_ptr<pool_promises>> promises;
  std::shared_ptr<event_log> events = std::make_shared<event_log>();
  run_actors everyone;
  std::vector<std::function<void()>> kills;  ///< per instance: kills its actors (an injected failure)
  std::shared_ptr<std::set<uint32_t>> dead = std::make_shared<std::set<uint32_t>>();
  metrics::registry registry;  ///< what the requests recovered from
  std::shared_ptr<metrics::runtime_metrics> metrics = std::make_shared<metrics::runtime_metrics>(registry);
};

/// The rManager of instance `i` (its pool made here, its plane the simulator's).
gpu::result<rmanager_actor> spawn_sim_rmanager(caf::actor_system& sys, const sim_setup& u, instance_id i,
                                               gmanager_actor gm, const transport::put_timer& put_timer,
                                               sim_cluster& c) {
  auto pool = gpu::kv_pool::create(c.device, u.layout, u.blocks);
  if (!pool.is_ok()) return pool.error();
  c.pools.push_back(std::make_shared<gpu::kv_pool>(std::move(pool).value()));
  c.caches.push_back(u.o.instance.prefix_cache == "off" ? nullptr : gpu::prefix_cache::over(c.pools.back(), i));
  auto made = transport::make_plane("sim", {.self = i, .timer = put_timer});
  if (!made.is_ok()) return engine_status(made.error());
  rmanager_config rc;
  rc.id = i;
  rc.pool = c.pools.back();
  rc.prefix_cache = c.caches.back();
  rc.prefix_root = c.prefix_root;
  rc.shared_prefixes = u.o.instance.prefix_cache == "cluster";
  rc.prefix_copy = u.o.instance.prefix_copy;
  rc.hosted = std::make_shared<hosted_blocks>();  // the rManager's registry (the sim's workers attend nothing)
  rc.promises = std::make_shared<pool_promises>();
  c.promises.push_back(rc.promises);
  rc.plane = std::move(made).value();
  rc.region = rc.plane->register_memory(rc.pool->base(), uint64_t(u.blocks) * u.layout.block_bytes()).value();
  rc.gmanager = gm;
  rc.events = c.events;
  rc.heartbeat_period = std::chrono::milliseconds(u.o.instance.heartbeat_ms);
  rc.lease = std::chrono::milliseconds(u.o.instance.lease_ms);
  rc.replica_min_tokens = uint32_t(u.o.instance.replica_min_tokens);
  rc.orphan_lease = std::chrono::milliseconds(u.o.instance.orphan_lease_ms);
  rc.metrics = c.metrics;
  rc.log = [](const std::string&) {};  // copies refused for want of room, peers gone: the report counts what matters
  rc.verify_moves = false;  // the sim pools have no contents
  rc.answer_timeout = rc.lease;
  return spawn_rmanager(sys, rc);
}

/// Spawns every instance of the run (pool, rManager, worker, instance) into `c`.
gpu::status spawn_sim_instances(caf::actor_system& sys, const sim_setup& u, gmanager_actor gm,
                                const transport::put_timer& put_timer, sim_cluster& c) {
  auto workers = std::make_shared<std::vector<caf::actor>>();
  auto busy_until = std::make_shared<std::vector<double>>(size_t(u.n_instances), 0.0);
  auto chunks = std::make_shared<chunk_layers>();
  auto calendar = std::make_shared<hosted_calendar>();
  for (int i = 0; i < u.n_instances; ++i) {
    auto rm = spawn_sim_rmanager(sys, u, instance_id(i), gm, put_timer, c);
    if (!rm.is_ok()) return rm.error();
    c.stats.push_back(std::make_shared<sim_worker_stats>());
    caf::actor worker = spawn_sim_worker(
        sys, {instance_id(i), u.model, u.steps, workers, c.stats.back(), busy_until, chunks, calendar, c.dead});
    workers->push_back(worker);
    instance_config ic;
    ic.id = instance_id(i);
    ic.pool = c.pools.back();
    ic.worker = worker;
    ic.rmanager = rm.value();
    ic.promises = c.promises.back();
    ic.batch = u.o.batch;
    ic.batch.max_batch_tokens = u.step_tokens;
    ic.batch.max_batch_seqs = u.o.batch.max_batch_seqs * u.batch_scale;
    ic.batch.mixed_step_tokens = u.mixed_step_tokens;
    ic.max_waiting = 1u << 30;
    ic.stream_tokens = u.o.injects_failures();  // the driver hands a dead instance's requests on with their tokens
    ic.metrics = c.metrics;
    ic.lending = u.o.policy == "infinite" || u.o.policy == "passive";
    ic.prefix_cache = c.caches.back();
    ic.prefix_root = c.prefix_root;
    ic.shared_prefixes = u.o.instance.prefix_cache == "cluster";
    instance_actor inst = spawn_instance(sys, ic);
    caf::anon_send(rm.value(), attach_atom::value, inst);
    c.instances.push_back(inst);
    c.kills.push_back([rm = rm.value(), worker, inst] {
      for (const caf::actor_addr& a : {rm.address(), worker.address(), inst.address()})
        caf::anon_send_exit(a, caf::exit_reason::kill);
    });
    c.everyone.add(rm.value());
    c.everyone.add(worker);
    c.everyone.add(inst);
  }
  return gpu::status::ok();
}

/// Discrete events: delivers every message, then jumps the clock to the next timer, until the `n` requests
/// have finished. Heartbeats never stop, so a run where no instance has stepped for o.stall_limit
/// (simulated) ends: what is unfinished then counts as failed.
void run_events(caf::scheduler::test_coordinator& sched, const sim_options& o, size_t n, const driver_record& record,
                const std::vector<std::shared_ptr<sim_worker_stats>>& stats, kv_meter& kv, timeline_meter& timeline) {
  uint64_t steps_seen = 0;
  auto last_progress = sched.clock().now();
  auto since_start = [&] { return std::chrono::duration<double>(sched.clock().now() - record.start).count(); };
  do {
    sched.run();
    kv.sample(since_start());
    timeline.sample(since_start(), kv, record, false);
    if (const uint64_t steps = total_steps(stats); steps != steps_seen) {
      steps_seen = steps;
      last_progress = sched.clock().now();
    } else if (sched.clock().now() - last_progress > o.stall_limit) {
      break;
    }
  } while (record.finished < n && sched.clock().trigger_timeout());
  timeline.sample(since_start(), kv, record, true);
}

/// The report's figures of the requests themselves: outcomes, tokens, latencies, makespan, rate.
void add_request_figures(sim_report& r, const std::vector<tracked>& outcome, clock_type::time_point start) {
  std::vector<double> ttft, tpot, normalized;
  double last_s = 0;
  auto seconds = [&](int64_t ns) {
    return std::chrono::duration<double>(std::chrono::nanoseconds(ns) - start.time_since_epoch()).count();
  };
  r.finished_s.assign(outcome.size(), -1);
  for (const tracked& t : outcome) {
    if (!t.done || t.end.reason == "error") {
      ++(!t.done ? r.failed : t.end.error.find("needs") != std::string::npos ? r.refused : r.failed);
      continue;
    }
    ++r.completed;
    r.prompt_tokens += uint64_t(t.input);
    r.prefix_hit_tokens += uint64_t(t.end.cached_tokens);
    r.finished_s[size_t(&t - outcome.data())] = seconds(t.end.finished_ns) - outcome.front().arrival_s;
    r.preemptions += uint64_t(t.end.preemptions);
    r.output_tokens += uint64_t(t.end.generated);
    const double first = seconds(t.end.first_token_ns), end = seconds(t.end.finished_ns);
    last_s = std::max(last_s, end);
    ttft.push_back(first - t.arrival_s);
    if (t.end.generated > 1) tpot.push_back((end - first) / (t.end.generated - 1));
    normalized.push_back((end - t.arrival_s) / std::max(1, t.end.generated));
  }
  const size_t n = outcome.size();
  r.makespan_s = last_s - (n ? outcome.front().arrival_s : 0);
  r.throughput_tok_s = r.makespan_s > 0 ? double(r.output_tokens) / r.makespan_s : 0;
  r.ttft_s = percentiles_of(ttft);
  r.tpot_s = percentiles_of(tpot);
  r.median_normalized_latency_s = frontend::percentile(normalized, 50);
  const double span = n > 1 ? outcome.back().arrival_s - outcome.front().arrival_s : 0;
  r.request_rate = span > 0 ? double(n) / span : 0;
}

/// The prompt tokens one LRU cache of `capacity` 16-token blocks finds, the requests' full prompt blocks put in it
/// in arrival order (sim_report::prefix_ceiling_tokens).
uint64_t prefix_ceiling_tokens(const std::vector<tracked>& requests, uint64_t capacity) {
  std::list<gpu::block_key> lru;  // most recently used first
  std::unordered_map<gpu::block_key, std::list<gpu::block_key>::iterator, gpu::block_key_hash> where;
  const gpu::block_key root = gpu::root_key("ceiling", "");
  uint64_t hits = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::vector<int32_t> tokens = tokens_of(requests[i], i);
    const auto keys = gpu::chain_keys(root, tokens, tokens.size() / gpu::kv_block_tokens);
    const size_t usable = (tokens.size() - 1) / gpu::kv_block_tokens;  // as a request attaches them
    size_t found = 0;
    while (found < usable && where.count(keys[found])) ++found;
    hits += found * gpu::kv_block_tokens;
    for (const gpu::block_key& k : keys) {
      if (auto at = where.find(k); at != where.end()) lru.erase(at->second);
      lru.push_front(k);
      where[k] = lru.begin();
      if (lru.size() > capacity) {
        where.erase(lru.back());
        lru.pop_back();
      }
    }
  }
  return hits;
}

/// The report's figures of failures: instances that died, requests recovered each way, positions recomputed.
void add_recovery_figures(sim_report& r, const driver_record& record, metrics::runtime_metrics& m) {
  r.failures = record.failures;
  const metrics::recovery_counts recovered = metrics::recoveries(m);
  r.recovered_by_replica = recovered.replica;
  r.recovered_by_takeover = recovered.takeover;
  r.recovered_by_recompute = recovered.recompute;
  r.positions_recomputed = recovered.positions;
}

/// What a run is made of, from the resolved options.
sim_setup setup_of(const sim_options& o, const resolved_options& resolved, uint32_t blocks) {
  const auto& [model, n_instances, batch_scale] = resolved.chosen;
  const gpu::model_config& shape = resolved.shape;
  const link_model links = o.timed_links ? link_model{model.node_link_bytes_per_s, model.network_bytes_per_s,
                                                      model.gpus_per_node, model.gpus}
                                         : link_model{};
  sim_setup u{o,
              model,
              n_instances,
              batch_scale,
              blocks,
              gpu::kv_layout{shape.n_layers, shape.n_kv_heads, shape.head_dim(), gpu::dtype::f16},
              step_layout{o.batch.overlap_min_tokens, dense_front_share(shape), o.hosted, o.decode_first, links,
                          attention_row_bytes::of(shape)}};
  u.step_tokens = o.batch.max_batch_tokens * batch_scale;
  u.mixed_step_tokens = o.batch.mixed_step_tokens == auto_mixed_step_tokens
                            ? placement::dense_knee_tokens(model, u.step_tokens)
                            : o.batch.mixed_step_tokens;
  return u;
}

}  // namespace

gpu::result<sim_report> simulate(const std::vector<frontend::trace_row>& trace, const sim_options& o) {
  const auto wall_start = std::chrono::steady_clock::now();
  auto resolved = resolve(o);
  if (!resolved.is_ok()) return resolved.error();
  const placement::profile& model = resolved->chosen.model;
  const uint32_t blocks = uint32_t(double(model.kv_capacity_tokens) * o.kv_scale / gpu::kv_block_tokens);
  if (blocks < 2) return gpu::status{gpu::status_code::invalid_argument, "the model leaves no room for KV"};
  const sim_setup u = setup_of(o, resolved.value(), blocks);

  caf::actor_system_config cfg;
  register_messages(cfg);
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.set("logger.verbosity", caf::atom("quiet"));
  caf::actor_system sys{cfg};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  gmanager_config gcfg;
  gcfg.policy_period = std::chrono::milliseconds(o.gmanager.policy_period_ms);
  if (o.policy == "infinite") gcfg.policy = placement::greedy_policy(model, o.greedy);
  gcfg.heartbeat_timeout = std::chrono::milliseconds(o.gmanager.heartbeat_timeout_ms);
  gcfg.dead_after = std::chrono::milliseconds(o.gmanager.dead_after_ms);
  gcfg.room_pass_limit = o.room_pass_limit;
  gmanager_actor gm = spawn_gmanager(sys, gcfg);
  sim_cluster c;
  c.everyone.add(gm);
  const transport::put_timer put_timer = timed_puts(sys, sched, u.steps.links, u.n_instances, c.everyone);
  ILLM_RETURN_IF_ERROR(spawn_sim_instances(sys, u, gm, put_timer, c));
  sched.run();  // joins, first heartbeats

  const size_t n = o.limit ? std::min(o.limit, trace.size()) : trace.size();
  auto record = record_of(trace, o, n);
  caf::actor client =
      sys.spawn(driver, record, c.instances, driver_routing{o.router, o.max_unstarted, o.prefix_weight, c.caches, c.prefix_root});
  c.everyone.add(client);
  if (o.injects_failures())
    c.everyone.add(spawn_failures(sys, {o.fail_at_s, o.fail_rate_per_hour, o.fail_seed, c.kills, c.dead, client}));
  kv_meter kv{c.pools, c.promises};
  timeline_meter timeline{o.timeline_period_s, c.stats};
  run_events(sched, o, n, *record, c.stats, kv, timeline);
  c.everyone.stop();
  sched.run();

  sim_report r;
  r.policy = o.policy;
  r.profile_name = model.name;
  r.instances = u.n_instances;
  r.kv_tokens_per_instance = uint64_t(blocks) * gpu::kv_block_tokens;
  r.rate_scale = o.rate_scale;
  r.requests = n;
  add_request_figures(r, record->requests, record->start);
  r.prefix_ceiling_tokens = prefix_ceiling_tokens(record->requests, uint64_t(blocks) * uint64_t(u.n_instances));
  r.moves = c.events->moves_ok();
  r.moves_failed = c.events->moves_failed();
  add_step_figures(r, c.stats);
  // Every token but a request's first comes from a decode step of one token.
  r.prefill_tokens = r.batch_tokens - std::min(r.batch_tokens, r.output_tokens - std::min<uint64_t>(r.output_tokens, r.completed));
  r.work_bound_s = work_bound_s(model, record->requests, u.step_tokens, u.n_instances);
  r.mixed_step_tokens = u.mixed_step_tokens;
  r.kv_used_fraction = kv.used_fraction();
  r.kv_promised_fraction = kv.promised_fraction();
  // What the running requests leave to a cache, on average: the bound a cache inside the serving memory works under.
  const double idle = std::clamp(1.0 - r.kv_used_fraction - r.kv_promised_fraction, 0.0, 1.0);
  r.prefix_ceiling_idle_tokens =
      prefix_ceiling_tokens(record->requests, uint64_t(double(blocks) * double(u.n_instances) * idle));
  r.timeline = timeline.rows();
  add_recovery_figures(r, *record, *c.metrics);
  r.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  return r;
}

}  // namespace illm::actors::sim
