// A chaos run: an embedded cluster with the scenario's faults (seeded), a mixed load drawn from the seed (one
// request longer than a pool, spread over several instances, and short ones), the scenario's action when the
// long request reaches its trigger, then the books: each request's ends and tokens against its fault-free
// answer (the engine's greedy ids for it alone on one pool, which a fault-free cluster gives too), and every
// surviving pool. Requests whose instance dies go on elsewhere (cluster_options::resume_elsewhere).
#include "actors/chaos/chaos.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "actors/cluster/cluster.hpp"
#include "gpu/backend_registry.hpp"
#include "gpu/generate.hpp"
#include "gpu/kv_pool.hpp"

namespace illm::actors::chaos {

namespace {

constexpr int max_output_tokens = 32;
constexpr auto partition_length = std::chrono::milliseconds(1000);  // shorter than a run, longer than a step
constexpr int joiner_requests = 2;  // short requests sent once an instance joined (to it: it is the emptiest)
/// A run waits while its requests move: it gives up once nothing was delivered for this long (a slow machine is
/// not a stuck run), or at the cap.
constexpr auto stall_limit = std::chrono::seconds(120);
constexpr auto run_cap = std::chrono::minutes(30);

/// One request of the load: what it asked for, what its client saw and what the instances sent it.
struct record {
  generate_params params;
  request_id id = 0;  ///< the cluster's id, once submitted
  client_view client;
  std::vector<delivery> deliveries;  ///< in the order the tap heard them
  size_t delivered_before_stop = SIZE_MAX;  ///< how many of them came before the harness stopped the cluster
};

/// The load of a run and its progress, shared with the request callbacks and the tap.
struct load {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<record> records;  ///< [0] is the long request
  size_t ended = 0;
  /// Deliveries by request id, as the tap hears them (a request's first may come before its submit returns).
  std::map<request_id, std::vector<delivery>> deliveries;
  /// When a token, an end or a delivery last came (the run's sign of life).
  std::chrono::steady_clock::time_point last_progress = std::chrono::steady_clock::now();
  /// The long request's tokens as its client saw them.
  size_t long_tokens() const { return records[0].client.tokens.size(); }
  /// Notes a sign of life and wakes the harness (called with `mutex` held).
  void progressed() {
    last_progress = std::chrono::steady_clock::now();
    changed.notify_all();
  }
};

/// `n` short greedy requests of random tokens (8 to 127 prompt tokens, 8 to max_output_tokens answers) drawn
/// from `random`.
std::vector<generate_params> short_requests(const gpu::loaded_model& model, std::mt19937_64& random, int n) {
  const int vocab = model.weights->config().vocab_size;
  auto tokens = [&](int count) {
    std::vector<int32_t> ids{1};  // BOS
    for (int i = 1; i < count; ++i) ids.push_back(int32_t(3 + random() % uint64_t(vocab - 3)));
    return ids;
  };
  auto length = [&] { return 8 + int(random() % (max_output_tokens - 7)); };
  std::vector<generate_params> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> prompt = tokens(8 + int(random() % 120));
    out.push_back({std::move(prompt), length(), 0.0f, 1.0f, 0, true});
  }
  return out;
}

/// The seed's load: one request of 1.2 to 1.5 pools (over several instances) and short ones of random tokens,
/// all greedy with fixed lengths. With prefix caches, each short prompt starts with 1 to 6 blocks of the long one.
std::vector<generate_params> make_load(const gpu::loaded_model& model, uint64_t seed, const chaos_options& o) {
  const int pool_tokens = o.kv_blocks_per_instance * int(gpu::kv_block_tokens);
  const int vocab = model.weights->config().vocab_size;
  std::vector<generate_params> out;
  const double share[] = {1.2, 1.35, 1.5};  // a few lengths: their fault-free answers are computed once
  std::mt19937_64 long_random(seed % 3);
  const int long_tokens = int(pool_tokens * share[seed % 3]);
  std::vector<int32_t> long_prompt{1};
  for (int i = 1; i < long_tokens; ++i) long_prompt.push_back(int32_t(3 + long_random() % uint64_t(vocab - 3)));
  out.push_back({long_prompt, max_output_tokens, 0.0f, 1.0f, 0, true});
  std::mt19937_64 random(seed);
  for (generate_params& p : short_requests(model, random, o.short_requests)) {
    if (o.prefix_cache != "off") {
      const size_t shared = gpu::kv_block_tokens * (1 + random() % 6);
      p.prompt.insert(p.prompt.begin() + 1, long_prompt.begin() + 1, long_prompt.begin() + std::ptrdiff_t(shared));
    }
    out.push_back(std::move(p));
  }
  return out;
}

/// The fault-free answer of `prompt` (max_output_tokens greedy ids alone on one pool), computed once per prompt.
const std::vector<int32_t>& reference(const gpu::loaded_model& model, const std::vector<int32_t>& prompt) {
  static std::mutex mutex;
  static std::map<std::vector<int32_t>, std::vector<int32_t>> known;
  std::lock_guard lock(mutex);
  if (auto it = known.find(prompt); it != known.end()) return it->second;
  static auto device = gpu::make_backend("cpu", int(std::max(1u, std::thread::hardware_concurrency())));
  gpu::generate_options g;
  g.prompt_ids = prompt;
  g.max_tokens = max_output_tokens;
  g.ignore_eos = true;
  auto out = device.is_ok() ? gpu::generate(model, *device.value(), g) : gpu::result<gpu::generate_result>(device.error());
  return known[prompt] = out.is_ok() ? out->token_ids : std::vector<int32_t>{};
}

cluster_options cluster_for(const scenario& s, uint64_t seed, const chaos_options& o, std::string& error) {
  cluster_options c;
  const int replicas = s.replica_min_tokens ? int(s.replica_min_tokens) : o.replica_min_tokens;
  c.instances = o.instances + (replicas ? 2 : 0);  // copies of a long request of up to 1.5 pools need that much free
  c.instance.backend = o.backend;
  c.instance.kv_type = o.kv_type;
  c.instance.prefix_cache = o.prefix_cache;
  c.instance.prefix_copy = o.prefix_copy;
  c.instance.kv_blocks_per_instance = o.kv_blocks_per_instance;
  c.instance.replica_min_tokens = replicas;
  c.instance.threads_per_instance = 1;
  c.instance.attention_timeout_ms = 2000;  // a lost attention message costs a step this long
  c.instance.lease_ms = 1000;
  c.instance.answer_timeout_ms = 1000;  // a lost answer costs the asker this long
  c.instance.orphan_lease_ms = 3000;  // a dead owner's blocks that nobody takes over are free before the books close
  if (s.owner_prefills) c.batch.room_prefill_min_chunks = 0;
  c.gmanager.policy_period_ms = 50;
  c.gmanager.heartbeat_timeout_ms = 500;
  c.gmanager.dead_after_ms = 1500;  // a hung instance: declared dead by its missed heartbeats
  c.resume_elsewhere = true;
  c.log = o.log ? o.log : [](const std::string&) {};  // the rManagers' lines: only with --verbose
  {  // every run's planes are faulty ones (a partition needs them), injecting only what the scenario asks
    auto plan = faults::parse_fault_plan(fmt::format("{}{}seed={}", s.faults, s.faults.empty() ? "" : ",", seed));
    if (!plan.is_ok()) error = plan.error().message();
    else c.faults = std::move(plan).value();
  }
  return c;
}

/// Submits the load's records from `from` on, to the most free instance of `view` each.
void submit_all(cluster& c, load& l, const cluster_view& view, size_t from = 0) {
  for (size_t i = from; i < l.records.size(); ++i) {
    request_callbacks cb{[&l, i](int32_t token) {
                           std::lock_guard lock(l.mutex);
                           l.records[i].client.tokens.push_back(token);
                           l.progressed();
                         },
                         [&l, i](const request_finished& end) {
                           std::lock_guard lock(l.mutex);
                           client_view& seen = l.records[i].client;
                           if (seen.ends++ == 0) {
                             ++l.ended;
                             seen.reason = end.reason;
                             seen.error = end.error;
                           }
                           l.progressed();
                         },
                         [&l](const delivery& d) {
                           std::lock_guard lock(l.mutex);
                           l.deliveries[d.req].push_back(d);
                           l.progressed();
                         }};
    const request_id id = c.submit(l.records[i].params, std::move(cb), view);
    std::lock_guard lock(l.mutex);
    l.records[i].id = id;
  }
}

/// The tap the cluster's instances tell what they send.
delivery_tap tap_into(load& l) {
  return [&l](const delivery& d) {
    std::lock_guard lock(l.mutex);
    l.deliveries[d.req].push_back(d);
    l.progressed();
  };
}

/// Whether every full block of the long request's prompt has a copy.
bool all_copied(cluster& c, const load& l) {
  uint64_t copies = 0;
  for (const auto& i : c.instances()) copies += i.replica_blocks;
  return copies >= l.records[0].params.prompt.size() / gpu::kv_block_tokens;
}

/// Whether the long request has reached the moment the scenario acts at: with replicas, once its blocks have
/// copies (or it has nearly decoded its answer without them: the run then reports the fault missed); mid room,
/// once an instance other than its owner keeps chunks of its prompt (or its first token came: missed); else once
/// it decodes.
bool triggered(cluster& c, const load& l, const scenario& s, instance_id owner) {
  const size_t tokens = l.long_tokens();
  if (s.replica_min_tokens && tokens >= 4) return all_copied(c, l) || tokens >= max_output_tokens - 4;
  if (s.what != action::kill_mid_room) return tokens >= 4;
  if (tokens > 0) return true;
  const auto pools = c.instances();
  return std::any_of(pools.begin(), pools.end(),
                     [&](const instance_report& i) { return i.alive && i.id != owner && i.hosted_blocks > 0; });
}

/// A live instance other than `owner` that holds blocks of the long request: the destination of its first move
/// when the gManager's placement map says it still holds some, else the one the map shows with the most, else
/// one that hosts blocks (the long request is the only one spread); none when none does.
std::optional<instance_id> holder_of(cluster& c, request_id long_id, instance_id owner) {
  std::map<instance_id, uint32_t> held;  // by the placement map
  if (const auto status = c.status())
    for (const request_status& r : status->requests)
      if (r.req_id == long_id)
        for (const request_placement_entry& e : r.blocks)
          if (e.inst_id != owner && e.num_blocks > 0) held[e.inst_id] = e.num_blocks;
  const auto pools = c.instances();
  auto alive = [&](instance_id id) {
    return std::any_of(pools.begin(), pools.end(), [&](const auto& i) { return i.alive && i.id == id; });
  };
  for (const move_report& m : c.moves())
    if (m.req_id == long_id && m.ok && held.count(m.dst_inst) && alive(m.dst_inst)) return m.dst_inst;
  std::optional<instance_id> best;
  for (const auto& [id, n] : held)
    if (alive(id) && (!best || n > held[*best])) best = id;
  for (const instance_report& i : pools)
    if (!best && i.alive && i.id != owner && i.hosted_blocks > 0) best = i.id;
  return best;
}

/// Whether the action strikes a holder of the long request rather than its owner.
bool strikes_holder(action what) {
  return what == action::kill_holder || what == action::kill_mid_room || what == action::drain ||
         what == action::partition || what == action::hang_holder;
}

/// Whom the action strikes, and why it misses its moment or its kind of target (empty: it does not).
struct aim {
  instance_id target = 0;
  std::string missed;
};

aim aim_at(cluster& c, load& l, const scenario& s, request_id long_id, instance_id owner) {
  aim a{owner, {}};
  if (s.what == action::none) return a;  // judged by whether its faults fired
  {
    std::lock_guard lock(l.mutex);
    if (l.records[0].client.ends > 0) a.missed = "the long request had ended";
    else if (s.what == action::kill_mid_room && l.long_tokens() > 0) a.missed = "the long request's prompt was computed";
    else if (s.replica_min_tokens && !all_copied(c, l)) a.missed = "the long request's blocks had no copies yet";
  }
  if (!strikes_holder(s.what)) return a;
  if (auto h = holder_of(c, long_id, owner)) {
    a.target = *h;
    return a;
  }
  if (a.missed.empty()) a.missed = "no instance but its owner held blocks of the long request";
  for (const auto& i : c.instances())
    if (i.alive && i.id != owner) a.target = i.id;
  return a;
}

/// Starts another instance and sends it short requests of the seed (they go to the emptiest: the new one).
std::string join_one(cluster& c, load& l, uint64_t seed, const gpu::loaded_model& model) {
  if (!c.add_instance().is_ok()) return {};
  std::mt19937_64 random(seed ^ 0x6a6f696e);
  size_t from = 0;
  {
    std::lock_guard lock(l.mutex);
    from = l.records.size();
    for (generate_params& p : short_requests(model, random, joiner_requests)) l.records.push_back({std::move(p)});
  }
  submit_all(c, l, c.view(), from);
  return "instance_joined";
}

/// Does what the scenario does to `target`; returns the fault's name (empty: nothing done).
std::string act(cluster& c, load& l, action what, instance_id target, uint64_t seed, const gpu::loaded_model& model) {
  switch (what) {
    case action::partition: return c.partition_instance(target, partition_length) ? "instance_partitioned" : "";
    case action::join: return join_one(c, l, seed, model);
    case action::none: return {};
    case action::kill_holder:
    case action::kill_mid_room:
    case action::kill_owner: return c.kill_instance(target) ? "instance_killed" : "";
    case action::hang_holder:
    case action::hang_owner: return c.hang_instance(target) ? "instance_hung" : "";
    case action::kill_gmanager: c.restart_gmanager(); return "gmanager_restarted";
    case action::drain: c.drain_instance(target); return "instance_drained";
  }
  return {};
}

/// The books of a run's requests, from a snapshot taken before the cluster stops.
books tally(const gpu::loaded_model& model, const std::vector<record>& records, uint64_t surviving_blocks,
            std::vector<std::string>& problems) {
  books b;
  b.runs = 1;
  for (size_t i = 0; i < records.size(); ++i) {
    const record& r = records[i];
    ++b.accepted;
    const verdict v =
        judge(r.deliveries, r.client, r.params.max_tokens, reference(model, r.params.prompt), r.delivered_before_stop);
    for (const std::string& p : v.problems) problems.push_back(fmt::format("request {}: {}", i, p));
    b.lost += v.lost;
    b.duplicated += v.duplicated;
    b.mismatched += v.mismatched;
    b.extra_tokens += v.extra_tokens;
    b.completed += v.completed;
    b.failed += v.failed;
    const uint64_t needed = gpu::blocks_for_tokens(int64_t(r.params.prompt.size()) + r.params.max_tokens);
    if (v.failed && needed <= surviving_blocks) {
      ++b.unjustified_failed;
      problems.push_back(fmt::format("request {} failed though the surviving pools hold it: {}", i, r.client.error));
    }
  }
  return b;
}

/// Checks the surviving pools once every release has landed and the prefix caches are emptied: blocks still taken
/// are leaked (a cached block some request never let go of among them).
uint64_t leaked_blocks(cluster& c, std::vector<std::string>& problems, uint64_t& surviving_blocks) {
  (void)c.wait_pools_free(std::chrono::seconds(10));
  (void)c.reset_prefix_cache();
  uint64_t leaked = 0;
  surviving_blocks = 0;
  for (const auto& i : c.instances()) {
    if (!i.alive) continue;
    surviving_blocks += i.total_blocks;
    if (!i.accounting.is_ok()) {
      ++leaked;
      problems.push_back(fmt::format("instance {}: {}", i.id, i.accounting.message()));
    }
    if (i.free_blocks != i.total_blocks) {
      leaked += i.total_blocks - i.free_blocks;
      problems.push_back(fmt::format("instance {}: {} of {} blocks free at the end", i.id, i.free_blocks, i.total_blocks));
    }
    if (i.landing_taken != 0) {
      leaked += i.landing_taken;
      problems.push_back(fmt::format("instance {}: {} landing slots held at the end", i.id, i.landing_taken));
    }
    // Every request ended, so no owner's table names a block anywhere: none is hosted, promised or copied.
    if (i.replica_blocks != 0) {
      leaked += i.replica_blocks;
      problems.push_back(fmt::format("instance {}: {} replica blocks kept for requests that ended", i.id, i.replica_blocks));
    }
    if (i.hosted_blocks != 0 || i.promised_blocks != 0) {
      leaked += std::max(i.hosted_blocks, i.promised_blocks);
      problems.push_back(fmt::format("instance {}: {} blocks hosted and {} promised for requests that ended", i.id,
                                     i.hosted_blocks, i.promised_blocks));
    }
  }
  return leaked;
}

}  // namespace

const std::vector<scenario>& scenarios() {
  static const std::vector<scenario> all = {
      {"kill-holder", "an instance holding blocks of the long request dies while it decodes", action::kill_holder, ""},
      {"kill-owner", "the long request's owner dies while it decodes", action::kill_owner, ""},
      {"kill-gmanager", "the gManager crashes while the long request decodes, and another starts", action::kill_gmanager,
       ""},
      {"kill-mid-room", "a holder of the long request's room dies while its prompt is computed", action::kill_mid_room,
       ""},
      {"drain", "an instance holding blocks of the long request drains while it decodes", action::drain, ""},
      {"control-dup-delay", "heartbeats, move answers and promises lost, twice or late",
       action::none,
       "heartbeat.drop=0.2,heartbeat.dup=0.1,heartbeat.delay=0.1,reply.dup=0.2,reply.delay=0.2,promise.dup=0.2,"
       "promise.delay=0.2,delay_ms=20"},
      {"lost-answers", "answers to moves and promises lost (the asker times out)", action::none,
       "reply.drop_first=1,promise.drop_first=1,reply.drop=0.1,promise.drop=0.1"},
      {"data-faults", "KV copies failed or dropped, attention messages twice or late", action::none,
       "put.fail=0.05,put.drop=0.05,send.dup=0.05,send.delay=0.05,delay_ms=20"},
      {"message-loss", "attention messages lost", action::none, "send.drop=0.005"},
      {"partition", "a holder of the long request is cut off the data plane for a second while it decodes",
       action::partition, ""},
      {"join", "an instance joins while the long request decodes, and takes new requests", action::join, ""},
      {"crash-mid-move", "a move's source dies once its copies are put, before it commits", action::none,
       "crash=mid_move", true},
      {"crash-mid-room", "the long request's owner dies once a chunk of its room is reserved at a holder",
       action::none, "crash=mid_room"},
      {"gmanager-orders", "the gManager's move orders lost, twice or late, and the gManager dies after ordering",
       action::none, "order.drop=0.2,order.dup=0.2,order.delay=0.2,delay_ms=30,crash=after_order@2", true},
      {"replica-holder", "replicas on: an instance holding blocks of the long request dies once they are copied",
       action::kill_holder, "", false, 512},
      {"replica-owner", "replicas on: the long request's owner dies once its blocks are copied, and a new owner takes "
       "them over", action::kill_owner, "", false, 512},
      {"hang-holder", "an instance holding blocks of the long request hangs while it decodes; only its missed "
       "heartbeats tell", action::hang_holder, ""},
      {"hang-owner", "the long request's owner hangs while it decodes; only its missed heartbeats tell",
       action::hang_owner, ""},
  };
  return all;
}

const scenario* find_scenario(const std::string& name) {
  for (const scenario& s : scenarios())
    if (s.name == name) return &s;
  return nullptr;
}

namespace {

/// Waits until `done()` (checked every 10 ms: moves do not wake the harness) while the run shows signs of life;
/// false when it stalled (nothing delivered for stall_limit) or reached `cap` first.
template <typename Done>
bool wait_while_alive(load& l, std::chrono::steady_clock::time_point cap, Done done) {
  std::unique_lock lock(l.mutex);
  while (!l.changed.wait_for(lock, std::chrono::milliseconds(10), done)) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= cap || now - l.last_progress >= stall_limit) return false;
  }
  return true;
}

/// Adds what the instances sent after `records` were taken, up to the cluster's stop, to their deliveries.
void add_late_deliveries(load& l, std::vector<record>& records) {
  std::lock_guard lock(l.mutex);
  for (record& r : records) {
    r.delivered_before_stop = r.deliveries.size();
    if (auto it = l.deliveries.find(r.id); it != l.deliveries.end()) r.deliveries = it->second;
  }
}

/// The records with their deliveries, as they stand now.
std::vector<record> snapshot(load& l) {
  std::lock_guard lock(l.mutex);
  std::vector<record> out = l.records;
  for (record& r : out)
    if (auto it = l.deliveries.find(r.id); it != l.deliveries.end()) r.deliveries = it->second;
  return out;
}

}  // namespace

run_result run(const gpu::loaded_model& model, const scenario& s, uint64_t seed, const chaos_options& options) {
  const auto started = std::chrono::steady_clock::now();
  run_result out{s.name, seed, {}, {}, {}, 0};
  load l;  // outlives the cluster, whose instances tell its tap
  for (generate_params& p : make_load(model, seed, options)) l.records.push_back({std::move(p)});
  std::string error;
  cluster_options co = cluster_for(s, seed, options, error);
  co.tap = tap_into(l);
  co.plant = options.plant;
  metrics::registry registry;  // what the run's requests recovered from, read at the end
  co.metrics = std::make_shared<metrics::runtime_metrics>(registry);
  auto made = error.empty() ? cluster::start(model.weights, co) : gpu::result<std::unique_ptr<cluster>>(
                                                                       gpu::status{gpu::status_code::invalid_argument, error});
  if (!made.is_ok()) {
    out.problems.push_back("the cluster did not start: " + made.error().message());
    out.tally.runs = 1;
    out.tally.lost = 1;
    return out;
  }
  cluster& c = *made.value();
  const cluster_view view = c.view();
  const instance_view* first = most_free_instance(view);
  const instance_id owner = first ? first->inst_id : 0;
  const request_id long_id = 1;  // the cluster numbers requests from 1: the long one is submitted first
  submit_all(c, l, view);
  const auto cap = std::chrono::steady_clock::now() + run_cap;
  bool stalled = !wait_while_alive(l, cap, [&] { return l.ended == l.records.size() || triggered(c, l, s, owner); });
  const aim a = aim_at(c, l, s, long_id, owner);
  if (const std::string fault = act(c, l, s.what, a.target, seed, model); !fault.empty())
    out.tally.faults[fault] += 1;
  stalled = stalled || !wait_while_alive(l, cap, [&] { return l.ended == l.records.size(); });
  if (stalled)
    out.problems.push_back(fmt::format("the run stalled: nothing delivered for {} s", stall_limit.count()));
  uint64_t surviving = 0;
  const uint64_t leaked = leaked_blocks(c, out.problems, surviving);  // waits for the releases
  std::vector<record> records = snapshot(l);  // what the clients saw, before the stop cancels what still runs
  for (const auto& [kind, n] : c.faults_injected()) out.tally.faults[kind] += n;
  c.shutdown();  // every actor is gone: whatever an instance sent late (a second end, a token) is in the record
  add_late_deliveries(l, records);
  books b = tally(model, records, surviving, out.problems);
  b.leaked_blocks = leaked;
  b.faults = out.tally.faults;
  for (const auto& [kind, n] : b.faults) b.faults_injected += n;
  const metrics::recovery_counts recovered = metrics::recoveries(*co.metrics);
  b.recovered_by_replica = recovered.replica;
  b.recovered_by_takeover = recovered.takeover;
  b.recovered_by_recompute = recovered.recompute;
  b.positions_recomputed = recovered.positions;
  out.missed = s.what == action::none && b.faults_injected == 0 ? "none of its faults fired" : a.missed;
  b.missed = !out.missed.empty();
  out.tally = b;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

}  // namespace illm::actors::chaos
