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
constexpr auto run_deadline = std::chrono::seconds(180);

/// One request of the load as the harness saw it.
struct record {
  generate_params params;
  std::vector<int32_t> tokens;
  int ends = 0;
  request_finished end;
};

/// The load of a run and its progress, shared with the request callbacks.
struct load {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<record> records;  ///< [0] is the long request
  size_t ended = 0;
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
/// all greedy with fixed lengths.
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
  for (generate_params& p : short_requests(model, random, o.short_requests)) out.push_back(std::move(p));
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
  c.instances = o.instances + (replicas ? 1 : 0);
  c.instance.backend = o.backend;
  c.instance.kv_blocks_per_instance = o.kv_blocks_per_instance;
  c.instance.replica_min_tokens = replicas;
  c.instance.threads_per_instance = 1;
  c.instance.attention_timeout_ms = 2000;  // a lost attention message costs a step this long
  c.instance.lease_ms = 1000;
  c.instance.orphan_lease_ms = 3000;  // a dead owner's blocks that nobody takes over are free before the books close
  if (s.owner_prefills) c.batch.room_prefill_min_chunks = 0;
  c.gmanager.policy_period_ms = 50;
  c.gmanager.heartbeat_timeout_ms = 500;
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
                           l.records[i].tokens.push_back(token);
                           l.changed.notify_all();
                         },
                         [&l, i](const request_finished& end) {
                           std::lock_guard lock(l.mutex);
                           if (l.records[i].ends++ == 0) ++l.ended;
                           l.records[i].end = end;
                           l.changed.notify_all();
                         }};
    c.submit(l.records[i].params, std::move(cb), view);
  }
}

/// Whether the long request's full blocks all have copies (or it has nearly decoded its answer without them: on a
/// loaded machine the copies can take longer than half its answer).
bool copied(cluster& c, load& l, size_t tokens) {
  uint64_t copies = 0;
  for (const auto& i : c.instances()) copies += i.replica_blocks;
  return copies >= l.records[0].params.prompt.size() / gpu::kv_block_tokens || tokens >= max_output_tokens - 4;
}

/// Whether the long request has reached the moment the scenario acts at.
bool triggered(cluster& c, load& l, const scenario& s, request_id long_id) {
  const size_t tokens = l.records[0].tokens.size();
  if (s.replica_min_tokens && tokens >= 4) return copied(c, l, tokens);
  if (s.what != action::kill_mid_room) return tokens >= 4;
  if (tokens > 0) return true;  // too late for the prompt: act now anyway
  const auto moves = c.moves();
  return std::any_of(moves.begin(), moves.end(), [&](const move_report& m) { return m.req_id == long_id && m.ok; });
}

/// An instance other than `owner` that holds blocks of the long request (the destination of its moves), else
/// any other live one.
instance_id holder_of(cluster& c, request_id long_id, instance_id owner) {
  for (const move_report& m : c.moves())
    if (m.req_id == long_id && m.ok && m.dst_inst != owner) return m.dst_inst;
  for (const auto& i : c.instances())
    if (i.alive && i.id != owner) return i.id;
  return owner;
}

/// Starts another instance and sends it short requests of the seed (they go to the emptiest: the new one).
std::string join_one(cluster& c, load& l, uint64_t seed, const gpu::loaded_model& model) {
  if (!c.add_instance().is_ok()) return {};
  std::mt19937_64 random(seed ^ 0x6a6f696e);
  size_t from = 0;
  {
    std::lock_guard lock(l.mutex);
    from = l.records.size();
    for (generate_params& p : short_requests(model, random, joiner_requests)) l.records.push_back({std::move(p), {}, 0, {}});
  }
  submit_all(c, l, c.view(), from);
  return "instance_joined";
}

/// Does what the scenario does; returns the fault's name (empty: nothing done).
std::string act(cluster& c, load& l, action what, request_id long_id, instance_id owner, uint64_t seed,
                const gpu::loaded_model& model) {
  switch (what) {
    case action::partition:
      return c.partition_instance(holder_of(c, long_id, owner), partition_length) ? "instance_partitioned" : "";
    case action::join: return join_one(c, l, seed, model);
    case action::none: return {};
    case action::kill_holder:
    case action::kill_mid_room: return c.kill_instance(holder_of(c, long_id, owner)) ? "instance_killed" : "";
    case action::kill_owner: return c.kill_instance(owner) ? "instance_killed" : "";
    case action::kill_gmanager: c.restart_gmanager(); return "gmanager_restarted";
    case action::drain: c.drain_instance(holder_of(c, long_id, owner)); return "instance_drained";
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
    if (r.ends == 0) {
      ++b.lost;
      problems.push_back(fmt::format("request {} never ended ({} tokens)", i, r.tokens.size()));
      continue;
    }
    if (r.ends > 1) {
      ++b.duplicated;
      problems.push_back(fmt::format("request {} ended {} times", i, r.ends));
    }
    if (r.end.reason == "length") {
      ++b.completed;
      const auto& want = reference(model, r.params.prompt);
      const bool same = r.tokens.size() == size_t(r.params.max_tokens) && want.size() >= r.tokens.size() &&
                        std::equal(r.tokens.begin(), r.tokens.end(), want.begin());
      if (!same) {
        ++b.mismatched;
        problems.push_back(fmt::format("request {}: its {} tokens differ from the fault-free ones", i, r.tokens.size()));
      }
      continue;
    }
    ++b.failed;
      const uint64_t needed = gpu::blocks_for_tokens(int64_t(r.params.prompt.size()) + r.params.max_tokens);
    if (needed <= surviving_blocks) {
      ++b.unjustified_failed;
      problems.push_back(fmt::format("request {} failed though the surviving pools hold it: {} {}", i, r.end.reason,
                                     r.end.error));
    }
  }
  return b;
}

/// Checks the surviving pools once every release has landed: blocks still taken are leaked.
uint64_t leaked_blocks(cluster& c, std::vector<std::string>& problems, uint64_t& surviving_blocks) {
  (void)c.wait_pools_free(std::chrono::seconds(10));
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

books& books::operator+=(const books& o) {
  runs += o.runs;
  accepted += o.accepted;
  completed += o.completed;
  failed += o.failed;
  unjustified_failed += o.unjustified_failed;
  lost += o.lost;
  duplicated += o.duplicated;
  mismatched += o.mismatched;
  leaked_blocks += o.leaked_blocks;
  faults_injected += o.faults_injected;
  recovered_by_replica += o.recovered_by_replica;
  positions_recomputed += o.positions_recomputed;
  for (const auto& [kind, n] : o.faults) faults[kind] += n;
  return *this;
}

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
       "reply.drop=0.1,promise.drop=0.1"},
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
  };
  return all;
}

const scenario* find_scenario(const std::string& name) {
  for (const scenario& s : scenarios())
    if (s.name == name) return &s;
  return nullptr;
}

run_result run(const gpu::loaded_model& model, const scenario& s, uint64_t seed, const chaos_options& options) {
  const auto started = std::chrono::steady_clock::now();
  run_result out{s.name, seed, {}, {}, 0};
  std::string error;
  cluster_options co = cluster_for(s, seed, options, error);
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
  load l;
  for (generate_params& p : make_load(model, seed, options)) l.records.push_back({std::move(p), {}, 0, {}});
  const cluster_view view = c.view();
  const instance_view* first = most_free_instance(view);
  const instance_id owner = first ? first->inst_id : 0;
  const request_id long_id = 1;  // the cluster numbers requests from 1: the long one is submitted first
  submit_all(c, l, view);
  const auto deadline = std::chrono::steady_clock::now() + run_deadline;
  std::unique_lock lock(l.mutex);
  while (std::chrono::steady_clock::now() < deadline &&  // moves do not wake it: it looks every 10 ms
         !l.changed.wait_for(lock, std::chrono::milliseconds(10),
                             [&] { return l.ended == l.records.size() || triggered(c, l, s, long_id); })) {
  }
  lock.unlock();
  if (const std::string fault = act(c, l, s.what, long_id, owner, seed, model); !fault.empty())
    out.tally.faults[fault] += 1;
  lock.lock();
  l.changed.wait_until(lock, deadline, [&] { return l.ended == l.records.size(); });
  const std::vector<record> snapshot = l.records;
  lock.unlock();
  uint64_t surviving = 0;
  const uint64_t leaked = leaked_blocks(c, out.problems, surviving);
  for (const auto& [kind, n] : c.faults_injected()) out.tally.faults[kind] += n;
  c.shutdown();
  books b = tally(model, snapshot, surviving, out.problems);
  b.leaked_blocks = leaked;
  b.faults = out.tally.faults;
  for (const auto& [kind, n] : b.faults) b.faults_injected += n;
  co.metrics->requests_recovered.each([&](const metrics::label_values& labels, const metrics::counter& n) {
    if (labels.size() == 2 && labels[1] == "replica") b.recovered_by_replica += uint64_t(n.value());
  });
  co.metrics->positions_recomputed.each(
      [&](const metrics::label_values&, const metrics::counter& n) { b.positions_recomputed += uint64_t(n.value()); });
  out.tally = b;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return out;
}

}  // namespace illm::actors::chaos
