// Embedded clusters on the real model: a request about three times one instance's pool completes,
// its blocks spread by moves (loans of a full owner, or the gManager's orders) or prefilled where they
// stay by its room's holders, with the token ids of one instance with enough memory; concurrent requests
// of mixed lengths get their ids alone and leave every pool as it started; remote attention moves only
// queries and partials, the same bytes per decode step at 1K and at 3K tokens of context.
#include <doctest/doctest.h>

#include <cmath>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "actors/cluster/cluster.hpp"
#include "actors/metrics/runtime_metrics.hpp"
#include "actors/placement/greedy_policy.hpp"
#include "actors/placement/profiler.hpp"
#include "gpu/backend_registry.hpp"
#include "gpu/generate.hpp"
#include "tests/actors/support.hpp"
#include "transport/registry.hpp"

using namespace illm;
using namespace illm::actors;
using namespace std::chrono_literals;

namespace {

const gpu::loaded_model& model() { return test::stories15m(); }

/// A prompt of about n tokens: a license text repeated, BOS first.
std::vector<int32_t> long_prompt(size_t n) {
  const std::string text =
      "The intent of this document is to state the conditions under which a Package may be copied, such that the "
      "Copyright Holder maintains some semblance of artistic control over the development of the package, while "
      "giving the users of the package the right to use and distribute the Package in a more-or-less customary "
      "fashion, plus the right to make reasonable modifications. ";
  std::string all;
  while (model().vocab->encode(all, true).size() < n) all += text;
  auto ids = model().vocab->encode(all, true);
  ids.resize(n);
  return ids;
}

/// Greedy ids of a request alone on one pool with room for all of it.
std::vector<int32_t> alone(const std::vector<int32_t>& prompt, int max_tokens) { return test::alone_on_cpu(prompt, max_tokens); }

/// A finished request as the cluster reported it.
struct outcome {
  std::vector<int32_t> tokens;
  request_finished end;
  size_t attention_bytes_at_token[64] = {};  // data-plane attention bytes when each token arrived
};

/// Attention bytes (attend and partials messages) sent by every instance so far.
uint64_t attention_bytes(cluster& c) {
  uint64_t n = 0;
  for (const auto& i : c.instances())
    n += i.traffic.message_bytes[uint8_t(transport::channel::attend)] +
         i.traffic.message_bytes[uint8_t(transport::channel::partials)];
  return n;
}

/// Submits requests together and waits for all of them.
std::vector<outcome> run_all(cluster& c, const std::vector<generate_params>& requests) {
  std::vector<outcome> out(requests.size());
  std::mutex mutex;
  std::condition_variable done;
  size_t finished = 0;
  for (size_t i = 0; i < requests.size(); ++i)
    c.submit(requests[i], {[&, i](int32_t token) {
                             std::lock_guard lock(mutex);
                             if (out[i].tokens.size() < 64) out[i].attention_bytes_at_token[out[i].tokens.size()] =
                                                              attention_bytes(c);
                             out[i].tokens.push_back(token);
                           },
                           [&, i](const request_finished& end) {
                             std::lock_guard lock(mutex);
                             out[i].end = end;
                             ++finished;
                             done.notify_all();
                           }});
  std::unique_lock lock(mutex);
  REQUIRE(done.wait_for(lock, 600s, [&] { return finished == requests.size(); }));
  return out;
}

/// Runs requests together and checks that each ends by its length with the ids it has alone on one pool.
std::vector<outcome> run_all_alone(cluster& c, const std::vector<generate_params>& requests) {
  auto got = run_all(c, requests);
  for (size_t i = 0; i < requests.size(); ++i) {
    REQUIRE_MESSAGE(got[i].end.reason == "length", got[i].end.error);
    CHECK_MESSAGE(got[i].tokens == alone(requests[i].prompt, requests[i].max_tokens), "request ", i);
  }
  return got;
}

size_t instances_holding(const request_finished& end) {
  std::map<instance_id, uint32_t> blocks;
  for (const auto& e : end.placement) blocks[e.inst_id] += e.num_blocks;
  return blocks.size();
}

void check_pools_back_to_start(cluster& c) {
  CHECK(c.wait_pools_free(10s));  // holders free a finished request's blocks a moment after it ends
  for (const auto& i : c.instances()) {
    if (!i.alive) continue;  // a killed instance's pool is left as it was
    CHECK_MESSAGE(i.accounting.is_ok(), i.accounting.message());
    CHECK_MESSAGE(i.free_blocks == i.total_blocks, "instance ", i.id, ": ", i.free_blocks, " of ", i.total_blocks,
                  " blocks free");
  }
}

generate_params greedy(std::vector<int32_t> prompt, int max_tokens) {
  return {std::move(prompt), max_tokens, 0.0f, 1.0f, 0, true};
}

/// `instances` instances of `blocks` KV blocks each, the gManager's policy every `policy_period`.
cluster_options pools(int instances, int blocks, std::chrono::milliseconds policy_period = 50ms) {
  cluster_options o;
  o.instances = instances;
  o.instance.kv_blocks_per_instance = blocks;
  o.gmanager.policy_period_ms = int(policy_period.count());
  return o;
}

/// 4 instances of 64 blocks (1024 tokens) each, the gManager's policy every `policy_period`.
cluster_options four_small_pools(std::chrono::milliseconds policy_period) { return pools(4, 64, policy_period); }

/// A 2900-token request (about three pools) alone on a cluster of `o`: its ids are those of one instance, its
/// blocks end on 3 or more instances, and the pools are whole again after it. Returns the cluster's moves.
std::vector<move_report> run_long_request(const cluster_options& o, int max_tokens) {
  const auto prompt = long_prompt(2900);
  auto c = cluster::start(model().weights, o);
  REQUIRE(c.is_ok());
  const auto got = run_all(*c.value(), {greedy(prompt, max_tokens)});
  REQUIRE(got[0].end.reason == "length");
  CHECK(got[0].tokens == test::alone_on_cpu(prompt, max_tokens, gpu::parse_dtype(o.instance.kv_type).value()));
  CHECK(instances_holding(got[0].end) >= 3);
  CHECK(c.value()->weight_placements() == 1);  // four instances on the cpu share one copy of the packed weights
  auto moves = c.value()->moves();
  check_pools_back_to_start(*c.value());
  c.value()->shutdown();
  return moves;
}

/// The long request with `policy` (empty: the simple one) run every 20 ms and its owner prefilling it: some of
/// its blocks are moved by the gManager's orders.
void check_spread_by_orders(placement::policy policy) {
  cluster_options o = four_small_pools(20ms);
  o.policy = std::move(policy);
  o.batch.room_prefill_min_chunks = 0;
  const auto moves = run_long_request(o, 16);
  CHECK(std::any_of(moves.begin(), moves.end(),
                    [](const move_report& m) { return m.ok && !m.self_initiated && !m.computed; }));
}

/// Submits one request to instance `on` alone (the router sees only it); `on_token` hears its tokens as they come.
std::future<outcome> submit_on(cluster& c, const generate_params& request, instance_id on,
                               std::function<void(size_t tokens)> on_token = {}) {
  cluster_view v = c.view();
  std::erase_if(v.instances, [on](const instance_view& i) { return i.inst_id != on; });
  REQUIRE(v.instances.size() == 1);
  auto done = std::make_shared<std::promise<outcome>>();
  auto got = std::make_shared<outcome>();
  c.submit(request, {[got, on_token](int32_t token) {
                       got->tokens.push_back(token);
                       if (on_token) on_token(got->tokens.size());
                     },
                     [got, done](const request_finished& end) {
                       got->end = end;
                       done->set_value(*got);
                     }},
           v);
  return done->get_future();
}

/// Runs one request on instance `on` alone (the router sees only it) and waits for its end.
outcome run_on(cluster& c, const generate_params& request, instance_id on) {
  auto f = submit_on(c, request, on);
  REQUIRE(f.wait_for(600s) == std::future_status::ready);
  return f.get();
}

/// Waits until the gManager has heard that instance `id` runs nothing and its cache holds at least `blocks` blocks.
bool wait_cached_blocks(cluster& c, instance_id id, uint32_t blocks) {
  for (int i = 0; i < 1000; ++i) {
    if (auto s = c.status())
      for (const member_status& m : s->members)
        if (m.inst_id == id && m.stats.cached_blocks >= blocks && m.stats.free_blocks == m.stats.total_blocks)
          return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

/// The blocks a request's last placement names, per instance.
std::map<instance_id, uint32_t> blocks_by_instance(const outcome& o) {
  std::map<instance_id, uint32_t> held;
  for (const auto& e : o.end.placement) held[e.inst_id] += e.num_blocks;
  return held;
}

/// A cluster of `instances` pools of `blocks` blocks with prefix caches in `mode`; `also` sets the rest.
std::unique_ptr<cluster> cached_cluster(int instances, int blocks, const std::string& mode,
                                        const std::function<void(cluster_options&)>& also = {}) {
  cluster_options o = pools(instances, blocks, 3600s);
  o.instance.prefix_cache = mode;
  if (also) also(o);
  auto started = cluster::start(model().weights, o);
  REQUIRE(started.is_ok());
  return std::move(started).value();
}

/// Two instances of 64 blocks with prefix caches in `mode`, once a 330-token prompt ran alone on instance `on` with
/// its ids and its blocks are cached there; and a branch of that prompt (its first 290 tokens, 18 full blocks, then a
/// sentence of its own).
struct cached_prompt {
  std::unique_ptr<cluster> c;
  std::vector<int32_t> first = long_prompt(330), branch;

  cached_prompt(const std::string& mode, instance_id on, const std::function<void(cluster_options&)>& also = {}) {
    c = cached_cluster(2, 64, mode, also);
    const outcome a = run_on(*c, greedy(first, 8), on);
    REQUIRE_MESSAGE(a.end.reason == "length", a.end.error);
    CHECK(a.tokens == alone(first, 8));
    CHECK(a.end.cached_tokens == 0);
    REQUIRE(wait_cached_blocks(*c, on, 20));
    branch.assign(first.begin(), first.begin() + 290);
    for (int32_t t : model().vocab->encode(" Once upon a time there was a cat.", false)) branch.push_back(t);
  }
};

}  // namespace

TEST_SUITE("actors") {
  TEST_CASE("a request three times one pool completes on loans with the ids of one instance") {
    cluster_options o = four_small_pools(3600s);  // the gManager stays out: only the full owner's own loans move blocks
    o.batch.room_prefill_min_chunks = 0;
    const auto moves = run_long_request(o, 32);
    REQUIRE_FALSE(moves.empty());
    for (const auto& m : moves)
      if (m.ok) CHECK(m.self_initiated);
  }

  TEST_CASE("a request three times one pool is prefilled by its room's holders with the ids of one instance") {
    cluster_options o = four_small_pools(3600s);
    o.batch.max_batch_tokens = 256;   // chunks of 256 - 64 (a decode token per sequence) = 192 tokens: about 15 go out
    o.batch.overlap_min_tokens = 64;  // the holders' steps run as two lanes
    metrics::registry registry;
    o.metrics = std::make_shared<metrics::runtime_metrics>(registry);
    const auto moves = run_long_request(o, 32);
    double counted = 0;  // illm:kv_blocks_prefilled_total, over the holders
    o.metrics->blocks_prefilled.each([&](const metrics::label_values&, const metrics::counter& c) { counted += c.value(); });
    std::set<instance_id> prefilled_at;
    size_t chunks = 0;
    uint32_t blocks = 0;
    for (const auto& m : moves)
      if (m.ok && m.computed) {
        ++chunks;
        blocks += m.blocks;
        prefilled_at.insert(m.dst_inst);
        CHECK(m.blocks <= 12);  // a holder's last chunk is what its room still holds
      }
    CHECK(chunks >= 10);
    // Of the prompt's 182 blocks the room holds all but the owner's part (about 136); on a loaded machine a
    // chunk whose holder answers late is computed by the owner instead, so at least half of the prompt.
    CHECK(blocks >= 91);
    CHECK(counted == blocks);
    CHECK(prefilled_at.size() >= 2);
  }

  TEST_CASE("16-bit KV pools: a request three times one pool completes on loans with the ids of one instance of its KV type") {
    for (const char* kv : {"f16", "bf16"}) {
      CAPTURE(kv);
      cluster_options o = four_small_pools(3600s);
      o.batch.room_prefill_min_chunks = 0;
      o.instance.kv_type = kv;
      const auto moves = run_long_request(o, 16);
      CHECK(std::any_of(moves.begin(), moves.end(), [](const move_report& m) { return m.ok; }));
    }
  }

  TEST_CASE("a seeded request with penalties, bias and log probabilities samples spread over pools as on one") {
    generate_params p{long_prompt(2900), 24, 0.9f, 0.95f, 7, true};
    p.top_k = 40;
    p.presence_penalty = 0.4f;
    p.frequency_penalty = 0.3f;
    p.repetition_penalty = 1.1f;
    p.logit_bias = {{29892, -2.0f}, {278, 1.5f}};
    p.logprobs = 3;
    auto run = [&](const cluster_options& o) {
      auto c = cluster::start(model().weights, o);
      REQUIRE(c.is_ok());
      std::vector<token_event> events;
      std::promise<request_finished> ended;
      request_callbacks cb;
      cb.on_token_event = [&](const token_event& e) { events.push_back(e); };
      cb.on_finished = [&](const request_finished& end) { ended.set_value(end); };
      c.value()->submit(p, cb);
      auto end = ended.get_future();
      REQUIRE(end.wait_for(600s) == std::future_status::ready);
      CHECK(end.get().reason == "length");
      check_pools_back_to_start(*c.value());
      c.value()->shutdown();
      return events;
    };
    cluster_options spread = four_small_pools(3600s);
    spread.batch.room_prefill_min_chunks = 0;
    const auto one = run(pools(1, 256)), loans = run(spread);
    REQUIRE(one.size() == 24);
    REQUIRE(loans.size() == one.size());
    for (size_t i = 0; i < one.size(); ++i) {
      CAPTURE(i);
      CHECK(loans[i].token == one[i].token);
      REQUIRE(one[i].logprobs.size() == 4);  // the token's own, then 3 alternatives
      REQUIRE(loans[i].logprobs.size() == 4);
      CHECK(one[i].logprobs[0].token == one[i].token);
      for (size_t k = 0; k < 4; ++k) CHECK(std::abs(loans[i].logprobs[k].logprob - one[i].logprobs[k].logprob) < 1e-4);
    }
  }

  TEST_CASE("the gManager's moves spread a long request with the ids of one instance") {
    check_spread_by_orders({});  // the simple policy
  }

  TEST_CASE("the greedy policy on a measured profile spreads a long request's attention with the ids of one instance") {
    auto device = gpu::make_backend("cpu", 1);
    REQUIRE(device.is_ok());
    placement::profiler_options po;
    po.repeats = 1;
    auto profile = placement::measure_profile(model(), *device.value(), po);
    REQUIRE(profile.is_ok());
    // The owner is a debtor (one request), the idle instances creditors: its attention is worth spreading.
    check_spread_by_orders(placement::greedy_policy(profile.value()));
  }

  TEST_CASE("a request that needs most of two pools keeps what fits on its owner and the rest in a room") {
    // 52 + 4 of 2 x 32 blocks: the other pool alone cannot hold all but the owner's working set (16).
    const auto prompt = long_prompt(52 * 16);
    cluster_options o = pools(2, 32, 3600s);
    o.batch.max_batch_tokens = 128;
    auto c = cluster::start(model().weights, o);
    REQUIRE(c.is_ok());
    const auto got = run_all(*c.value(), {greedy(prompt, 60)});
    REQUIRE_MESSAGE(got[0].end.reason == "length", got[0].end.error);
    CHECK(got[0].tokens == alone(prompt, 60));
    CHECK(instances_holding(got[0].end) == 2);
    check_pools_back_to_start(*c.value());
    c.value()->shutdown();
  }

  TEST_CASE("concurrent requests of mixed lengths get their ids alone and leave the pools as they were") {
    std::vector<generate_params> requests;
    for (const char* p : {"Once upon a time", "Tom and Jane went to the park", "The little dog", "Lily and Ben",
                          "One day, a big bird"})
      requests.push_back(greedy(model().vocab->encode(p, true), 24));
    requests.push_back(greedy(long_prompt(1300), 16));  // 82 blocks: more than any one pool
    cluster_options o = pools(3, 64);
    auto c = cluster::start(model().weights, o);
    REQUIRE(c.is_ok());
    const auto got = run_all_alone(*c.value(), requests);
    CHECK(instances_holding(got.back().end) >= 2);
    check_pools_back_to_start(*c.value());
    c.value()->shutdown();
  }

  TEST_CASE("control and data messages duplicated and delayed change no token and leak no block") {
    std::vector<generate_params> requests;
    for (const char* p : {"Once upon a time", "The little dog", "Lily and Ben"})
      requests.push_back(greedy(model().vocab->encode(p, true), 24));
    requests.push_back(greedy(long_prompt(1300), 16));  // more than any one pool: a room, loans and moves
    cluster_options o = pools(3, 64, 20ms);
    auto plan = faults::parse_fault_plan(
        "seed=5,heartbeat.drop=0.2,heartbeat.dup=0.2,heartbeat.delay=0.2,reply.dup=0.3,reply.delay=0.3,"
        "promise.dup=0.3,promise.delay=0.3,send.dup=0.05,delay_ms=5");
    REQUIRE(plan.is_ok());
    o.faults = plan.value();
    auto c = cluster::start(model().weights, o);
    REQUIRE(c.is_ok());
    const auto got = run_all_alone(*c.value(), requests);
    check_pools_back_to_start(*c.value());
    const auto injected = c.value()->faults_injected();
    MESSAGE("faults injected: ", injected.size(), " kinds");
    CHECK(injected.count("heartbeat_duplicate") == 1);
    CHECK(injected.count("send_duplicate") == 1);
    c.value()->shutdown();
  }

  TEST_CASE("remote attention sends the same bytes per decode step at 1K and at 3K tokens") {
    // Once per request, move all but its last four blocks to the other instance: one remote holder.
    auto moved = std::make_shared<std::set<request_id>>();
    auto policy = [moved](const std::vector<placement::instance_snapshot>& cluster) {
      std::vector<placement::move_order> orders;
      for (const auto& s : cluster)
        for (const auto& e : s.placement)
          if (e.local && e.num_blocks >= 16 && !moved->count(e.req_id)) {
            moved->insert(e.req_id);
            orders.push_back({e.req_id, s.id, s.id == 0 ? 1u : 0u, e.num_blocks - 4});
          }
      return orders;
    };
    std::map<int, double> bytes_per_step;
    for (int context : {1000, 3000}) {
      cluster_options o = pools(2, 160, 10ms);
      o.policy = policy;
      auto c = cluster::start(model().weights, o);
      REQUIRE(c.is_ok());
      const auto got = run_all(*c.value(), {greedy(long_prompt(size_t(context)), 32)});
      REQUIRE(got[0].end.reason == "length");
      REQUIRE(instances_holding(got[0].end) == 2);
      // Steady decode: the last 16 steps, long after the move (however late a loaded machine makes it). A
      // token may reach the client before or after the next step's query left, so one step's reading can be
      // off by one message; over 16 steps that is a fraction of a percent.
      const auto& at = got[0].attention_bytes_at_token;
      bytes_per_step[context] = double(at[31] - at[15]) / 16.0;
      check_pools_back_to_start(*c.value());
      c.value()->shutdown();
    }
    MESSAGE("attention bytes per decode step: 1K ", bytes_per_step[1000], ", 3K ", bytes_per_step[3000]);
    CHECK(bytes_per_step[1000] > 0);
    // Three times the context, the same traffic (the KV would be three times larger).
    CHECK(std::abs(bytes_per_step[3000] - bytes_per_step[1000]) <= 0.02 * bytes_per_step[1000]);
    // Queries and partials of one holder, six layers: a few KiB, nothing like the KV.
    CHECK(bytes_per_step[3000] < 32 * 1024);
  }
}

TEST_SUITE("actors") {
  TEST_CASE("a prefix cached on one instance serves a request on another where it lies, with the ids of one instance") {
    metrics::registry registry;
    auto counted = std::make_shared<metrics::runtime_metrics>(registry);
    cached_prompt p("cluster", 0, [&](cluster_options& o) { o.metrics = counted; });
    const auto lookups = [&] {
      double n = 0;
      counted->prefix_index_lookups.each([&](const metrics::label_values&, const metrics::counter& c) { n += c.value(); });
      return n;
    };
    // A gManager that starts afresh rebuilds its index of the caches from the members' full reports.
    const prefix_hits before = p.c->cached_prefix(greedy(p.branch, 12));
    CHECK(before == prefix_hits{{0, 18}});
    p.c->restart_gmanager();
    prefix_hits after;
    for (int i = 0; i < 1000 && after != before; ++i, std::this_thread::sleep_for(10ms))
      after = p.c->cached_prefix(greedy(p.branch, 12));
    REQUIRE(after == before);
    // The branch on instance 1: its 18 full blocks in common are read where instance 0 keeps them. The index is
    // asked once: by the front end as it routes the request, whose instance reads the runs it named.
    const double before_branch = lookups();
    const outcome b = run_on(*p.c, greedy(p.branch, 12), 1);
    CHECK(lookups() - before_branch == 1);
    REQUIRE_MESSAGE(b.end.reason == "length", b.end.error);
    CHECK(b.tokens == alone(p.branch, 12));
    CHECK(b.end.cached_tokens == 18 * 16);
    std::map<instance_id, uint32_t> held = blocks_by_instance(b);
    CHECK(held[0] == 18);  // read in place: the owner holds only what it computed
    CHECK(held[1] >= 1);
    // The cached blocks are read by nobody now: free memory, and freed by a reset.
    CHECK(p.c->reset_prefix_cache().value_or(0) > 0);
    check_pools_back_to_start(*p.c);
    p.c->shutdown();
  }

  TEST_CASE("a remote prefix copied into the reader's cache serves the request locally, with the ids of one instance") {
    for (const int copy : {prefix_copy_always, prefix_copy_by_model}) {
      CAPTURE(copy);
      metrics::registry registry;
      auto counted = std::make_shared<metrics::runtime_metrics>(registry);
      cached_prompt p("cluster", 0, [&](cluster_options& o) {
        o.instance.prefix_copy = copy;
        o.metrics = counted;
      });
      if (copy == prefix_copy_by_model) {
        // The model copies only what it can price: the first read at instance 0 measures the round trip there.
        const outcome first = run_on(*p.c, greedy(p.first, 4), 1);
        REQUIRE_MESSAGE(first.end.reason == "length", first.end.error);
        CHECK(first.end.cached_tokens == 20 * 16);
        std::map<instance_id, uint32_t> read = blocks_by_instance(first);
        CHECK(read[0] == 20);  // read in place
      }
      // A long answer: reading 18 blocks in place costs 6 round trips a step, the copy three and 250 KB.
      const outcome b = run_on(*p.c, greedy(p.branch, 48), 1);
      REQUIRE_MESSAGE(b.end.reason == "length", b.end.error);
      CHECK(b.tokens == alone(p.branch, 48));
      CHECK(b.end.cached_tokens == 18 * 16);
      std::map<instance_id, uint32_t> held = blocks_by_instance(b);
      CHECK(held[0] == 0);  // copied: nothing read at instance 0
      double copied = 0;
      counted->prefix_cache_copied.each(
          [&](const metrics::label_values& l, const metrics::counter& c) { copied += l[0] == "1" ? c.value() : 0; });
      CHECK(copied == 18);
      // The copies stay in instance 1's cache (idle: free memory) until a reset.
      CHECK(p.c->cached_prefix(greedy(p.branch, 12)) == prefix_hits{{0, 18}, {1, 18}});
      CHECK(p.c->reset_prefix_cache().value_or(0) > 0);
      check_pools_back_to_start(*p.c);
      p.c->shutdown();
    }
  }

  TEST_CASE("a conversation whose turns ran on two instances reads its history in pieces where each turn left it") {
    auto started = cached_cluster(2, 64, "cluster");
    cluster& c = *started;
    // Each turn: the conversation so far (the last prompt and its answer) and some new tokens, on instance 0, 1, 0.
    std::vector<int32_t> prompt = long_prompt(200);
    const std::vector<int32_t> more = long_prompt(60);
    const instance_id on[] = {0, 1, 0};
    std::vector<outcome> turns;
    for (int t = 0; t < 3; ++t) {
      if (t > 0) {
        prompt.insert(prompt.end(), turns.back().tokens.begin(), turns.back().tokens.end());
        prompt.insert(prompt.end(), more.begin() + 1, more.end() - 20 * (t - 1));
        // The turn before has ended, its blocks cached where it ran and reported to the index.
        REQUIRE(wait_cached_blocks(c, on[t - 1], 1));
      }
      turns.push_back(run_on(c, greedy(prompt, 8), on[t]));
      REQUIRE_MESSAGE(turns.back().end.reason == "length", turns.back().end.error);
      CHECK(turns.back().tokens == alone(prompt, 8));
    }
    // Turn 2 read turn 0's 12 full blocks at instance 0; turn 3 read them at home and turn 2's blocks after them at
    // instance 1: all 17 full blocks of the history (the last answer's last token was never computed).
    CHECK(turns[1].end.cached_tokens == 12 * 16);
    CHECK(turns[2].end.cached_tokens == 17 * 16);
    std::map<instance_id, uint32_t> held = blocks_by_instance(turns[2]);
    CHECK(held[1] == 5);
    CHECK(c.reset_prefix_cache().value_or(0) > 0);
    check_pools_back_to_start(c);
    c.shutdown();
  }

  TEST_CASE("a request that starts over after its holder died reads its prefix where another cache keeps it") {
    // Pools of 16 blocks: the branch below keeps 6 at home and reads 11 elsewhere, so that when those 11 are lost
    // its pool cannot compute them again beside its own, and it starts over from its tokens.
    metrics::registry registry;
    auto counted = std::make_shared<metrics::runtime_metrics>(registry);
    auto started = cached_cluster(3, 16, "cluster", [&](cluster_options& o) {
      o.instance.prefix_copy = prefix_copy_never;  // read in place: the holder's death costs the reader those blocks
      o.metrics = counted;
    });
    cluster& c = *started;
    // The prompt computed on instances 0 and 2 at once (neither finds the other's blocks): both caches keep it.
    const std::vector<int32_t> first = long_prompt(200);
    auto on0 = submit_on(c, greedy(first, 4), 0), on2 = submit_on(c, greedy(first, 4), 2);
    REQUIRE(on0.wait_for(600s) == std::future_status::ready);
    REQUIRE(on2.wait_for(600s) == std::future_status::ready);
    REQUIRE(wait_cached_blocks(c, 0, 12));
    REQUIRE(wait_cached_blocks(c, 2, 12));
    std::vector<int32_t> branch(first.begin(), first.begin() + 190);
    for (int32_t t : model().vocab->encode(" Once upon a time there was a cat.", false)) branch.push_back(t);
    // The branch on instance 1 reads its 11 shared blocks at one of them; that one dies while the branch decodes.
    std::promise<void> decoding;
    auto b = submit_on(c, greedy(branch, 64), 1, [&](size_t n) {
      if (n == 4) decoding.set_value();
    });
    REQUIRE(decoding.get_future().wait_for(600s) == std::future_status::ready);
    instance_id holder = 1;  // where the gManager's placement shows its blocks, once a heartbeat has told it
    for (int i = 0; i < 1000 && holder == 1; ++i, std::this_thread::sleep_for(5ms))
      if (auto s = c.status())
        for (const request_status& r : s->requests)
          for (const auto& e : r.blocks)
            if (e.inst_id != 1) holder = e.inst_id;
    REQUIRE(holder != 1);
    REQUIRE(c.kill_instance(holder));
    REQUIRE(b.wait_for(600s) == std::future_status::ready);
    const outcome got = b.get();
    REQUIRE_MESSAGE(got.end.reason == "length", got.end.error);
    CHECK(got.tokens == alone(branch, 64));
    const instance_id survivor = 2 - holder;
    CHECK(blocks_by_instance(got)[survivor] == 11);  // read again where the other cache keeps them
    // Computed again: at most its positions past the shared blocks (about 30; none when its own full blocks, cached
    // at home, held all it had computed), not the 176 the other cache kept.
    const metrics::recovery_counts r = metrics::recoveries(*counted);
    CHECK(r.recompute == 1);
    CHECK(r.positions < 11 * 16);
    CHECK(c.reset_prefix_cache().value_or(0) > 0);
    check_pools_back_to_start(c);
    c.shutdown();
  }

  TEST_CASE("a creditor's cache keeps the blocks it held for a request: the same prompt again reads them there") {
    // 52 + 4 of 2 x 32 blocks: what does not fit on the owner is computed and held on the other instance (a room),
    // so only that instance's cache can give those blocks to a later request.
    const auto prompt = long_prompt(52 * 16);
    auto started = cached_cluster(2, 32, "cluster", [](cluster_options& o) {
      o.batch.max_batch_tokens = 128;
      o.instance.prefix_copy = prefix_copy_never;  // read in place, so that the placement shows where they lie
    });
    cluster& c = *started;
    const outcome a = run_on(c, greedy(prompt, 8), 0);
    REQUIRE_MESSAGE(a.end.reason == "length", a.end.error);
    CHECK(a.tokens == alone(prompt, 8));
    const uint32_t lent = blocks_by_instance(a)[1];
    REQUIRE(lent > 0);
    REQUIRE(wait_cached_blocks(c, 1, lent));
    const outcome b = run_on(c, greedy(prompt, 8), 0);
    REQUIRE_MESSAGE(b.end.reason == "length", b.end.error);
    CHECK(b.tokens == alone(prompt, 8));
    CHECK(b.end.cached_tokens == 51 * 16);  // every full prompt block but the last token's
    CHECK(blocks_by_instance(b)[1] == lent);
    CHECK(c.reset_prefix_cache().value_or(0) > 0);
    check_pools_back_to_start(c);
    c.shutdown();
  }

  TEST_CASE("a request whose cached prefix another request reads needs only its own blocks to start") {
    // One pool of 26 blocks. A: 300 prompt tokens and 60 out (23 blocks in all, counted as its growth). B: A's
    // first 290 tokens and a sentence, 8 out: 20 blocks, 18 of them A's prompt blocks that A reads. Beside A, 3
    // blocks are free for a new request: B starts on its 2 blocks of its own, and ends long before A.
    auto started = cached_cluster(1, 26, "local");
    cluster& c = *started;
    const std::vector<int32_t> a = long_prompt(300);
    std::vector<int32_t> b(a.begin(), a.begin() + 290);
    for (int32_t t : model().vocab->encode(" Once upon a time there was a cat.", false)) b.push_back(t);
    std::promise<void> a_decoding;
    std::atomic<bool> b_before_a{false};
    auto first = submit_on(c, greedy(a, 60), 0, [&](size_t n) {
      if (n == 4) a_decoding.set_value();
    });
    REQUIRE(a_decoding.get_future().wait_for(600s) == std::future_status::ready);
    auto second = submit_on(c, greedy(b, 8), 0);
    REQUIRE(second.wait_for(600s) == std::future_status::ready);
    b_before_a = first.wait_for(0s) != std::future_status::ready;
    REQUIRE(first.wait_for(600s) == std::future_status::ready);
    const outcome got_a = first.get(), got_b = second.get();
    CHECK(got_a.tokens == alone(a, 60));
    CHECK(got_b.tokens == alone(b, 8));
    CHECK(got_b.end.cached_tokens == 18 * 16);
    CHECK(b_before_a);  // it did not wait for A's blocks
    check_pools_back_to_start(c);
    c.shutdown();
  }

  TEST_CASE("with per-instance caches a request goes to the instance that holds its prefix") {
    cached_prompt p("local", 1);
    // Both pools are as free (cached blocks nobody reads count as free): the most free would be instance 0.
    const outcome b = run_all_alone(*p.c, {greedy(p.branch, 12)})[0];
    CHECK(b.end.cached_tokens == 18 * 16);
    REQUIRE(b.end.placement.size() == 1);
    CHECK(b.end.placement[0].inst_id == 1);
    p.c->shutdown();
  }

  TEST_CASE("a request cancelled mid-stream ends once as cancelled and frees its blocks") {
    cluster_options o = pools(2, 32);
    auto c = cluster::start(model().weights, o);
    REQUIRE(c.is_ok());
    cluster& cl = *c.value();
    std::mutex mutex;
    std::vector<int32_t> tokens;
    std::promise<request_finished> finished;
    int endings = 0;
    request_id id = 0;
    id = cl.submit(greedy(long_prompt(300), 400), {[&](int32_t t) {
                                                     std::lock_guard lock(mutex);
                                                     tokens.push_back(t);
                                                     if (tokens.size() == 5) cl.cancel(id);
                                                   },
                                                   [&](const request_finished& end) {
                                                     std::lock_guard lock(mutex);
                                                     if (++endings == 1) finished.set_value(end);
                                                   }});
    const request_finished end = finished.get_future().get();
    CHECK(end.reason == "cancelled");
    {
      std::lock_guard lock(mutex);
      CHECK(tokens.size() >= 5);
      CHECK(tokens.size() < 400);
    }
    check_pools_back_to_start(cl);
    cl.shutdown();
    CHECK(endings == 1);
  }

  TEST_CASE("a request that cannot be served is refused with a reason") {
    cluster_options o = pools(2, 8);
    auto c = cluster::start(model().weights, o);
    REQUIRE(c.is_ok());
    const auto got = run_all(*c.value(), {greedy({}, 4), greedy(long_prompt(400), 4)});
    CHECK(got[0].end.reason == "error");
    CHECK(got[0].end.error.find("empty prompt") != std::string::npos);
    CHECK(got[1].end.reason == "error");
    CHECK(got[1].end.error.find("the cluster has 16") != std::string::npos);
    c.value()->shutdown();
  }

  TEST_CASE("attention messages from a sender that is no member are dropped and counted, and serving goes on") {
    cluster_options o = pools(2, 64);
    metrics::registry registry;
    o.metrics = std::make_shared<metrics::runtime_metrics>(registry);
    auto c = cluster::start(model().weights, o);
    REQUIRE(c.is_ok());
    transport::plane_options po;
    po.self = 9;  // no instance of the view
    po.group = c.value()->plane_group();
    auto stranger = transport::make_plane("inproc", po);
    REQUIRE(stranger.is_ok());
    const std::vector<uint8_t> junk(64, 0x5a);
    for (instance_id to : {0u, 1u}) {
      stranger.value()->send(to, transport::channel::attend, junk, [](const transport::status&) {});
      stranger.value()->send(to, transport::channel::partials, junk, [](const transport::status&) {});
    }
    auto dropped = [&](instance_id at) { return o.metrics->plane_messages_dropped.with({std::to_string(at)}).value(); };
    for (int i = 0; i < 500 && dropped(0) + dropped(1) < 4; ++i) std::this_thread::sleep_for(10ms);
    CHECK(dropped(0) == 2);
    CHECK(dropped(1) == 2);
    const auto prompt = long_prompt(1500);  // about 1.5 pools: both instances attend it
    const auto got = run_all_alone(*c.value(), {greedy(prompt, 8)});
    CHECK(instances_holding(got[0].end) == 2);
    CHECK(dropped(0) + dropped(1) == 4);  // the members' messages all pass
    check_pools_back_to_start(*c.value());
    c.value()->shutdown();
  }
}
