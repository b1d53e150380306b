// The performance model's arithmetic (T = W/f + S/g, the debtor and creditor forms, instance and cluster
// TPS, profiles in JSON and from rooflines, the profiler's fit) and the greedy policy's rules: debtors by
// batch ascending, creditors by memory use ascending and re-sorted after each move, a stop when nothing is
// gained, and the paper's Fig. 5 scenario placed as in Fig. 5c.
#include <doctest/doctest.h>

#include <cmath>

#include "actors/placement/greedy_policy.hpp"
#include "actors/placement/perf_model.hpp"
#include "actors/placement/profiler.hpp"
#include "gpu/model_config.hpp"

using namespace illm::actors;
using namespace illm::actors::placement;

namespace {

profile toy() {
  profile p;
  p.n_layers = 2;
  p.dense_s = {{1, 1e-3}, {3, 2e-3}};
  p.attention_tokens_per_s = 1000;
  p.step_overhead_s = 0.5e-3;
  p.sampled_row_s = 0.1e-3;
  return p;
}

/// An instance snapshot: total and used blocks, running requests, queue, and owned requests (total, local).
instance_snapshot instance(instance_id id, uint32_t total, uint32_t used, uint32_t batch, uint32_t waiting,
                           uint32_t waiting_blocks, std::vector<std::pair<uint32_t, uint32_t>> requests) {
  instance_snapshot s;
  s.id = id;
  s.stats.total_blocks = total;
  s.stats.free_blocks = total - used;
  s.stats.batch_size = batch;
  s.stats.waiting = waiting;
  s.stats.waiting_blocks = waiting_blocks;
  request_id r = id * 1000;
  for (auto [blocks, local] : requests) {
    ++r;
    s.placement.push_back({r, id, local, true});
    if (blocks > local) s.placement.push_back({r, id + 100, blocks - local, false});
  }
  return s;
}

}  // namespace

TEST_SUITE("actors") {
  TEST_CASE("the performance model's arithmetic") {
    const profile p = toy();
    CHECK(dense_time(p, 1) == doctest::Approx(1e-3));
    CHECK(dense_time(p, 2) == doctest::Approx(1.5e-3));  // between points
    CHECK(dense_time(p, 5) == doctest::Approx(3e-3));    // the last slope beyond them
    CHECK(dense_throughput(p, 2) == doctest::Approx(2 / 1.5e-3));
    CHECK(layer_time(p, 2, 500) == doctest::Approx(1.5e-3 + 0.5));
    CHECK(debtor_layer_time(p, 2, 500, 100) == doctest::Approx(1.5e-3 + 0.4));
    CHECK(creditor_layer_time(p, 2, 500, 100) == doctest::Approx(1.5e-3 + 0.6));
    CHECK(step_time(p, 2, 500, 2) == doctest::Approx(0.5e-3 + 2 * 0.1e-3 + 2 * (1.5e-3 + 0.5)));
    CHECK(instance_tps(p, 2, 500) == doctest::Approx(2 / step_time(p, 2, 500, 2)));
    CHECK(cluster_tps(p, {{2, 500}, {1, 0}}) == doctest::Approx(instance_tps(p, 2, 500) + instance_tps(p, 1, 0)));
    auto back = profile_from_json(to_json(p));
    REQUIRE(back.is_ok());
    CHECK(back->dense_s == p.dense_s);
    CHECK(back->attention_tokens_per_s == p.attention_tokens_per_s);
    CHECK_FALSE(profile_from_json("{\"n_layers\": 2}").is_ok());
    CHECK_FALSE(profile_from_json("[").is_ok());
    profile no_time = toy();
    no_time.dense_s.front().second = 0;
    CHECK(profile_from_json(to_json(no_time)).error().message().find("seconds above 0") != std::string::npos);
    profile negative = toy();
    negative.step_overhead_s = -1e-3;
    CHECK(profile_from_json(to_json(negative)).error().message().find("must be 0 or more") != std::string::npos);
  }

  TEST_CASE("a remote prefix run is copied only when the copy costs less than reading it in place") {
    // llama2-13b's KV block (16 tokens x 40 layers x K and V x 5120 x 2 bytes: 13.1 MB), 40 layers, 20 us round trips,
    // 25 GB/s: a copy costs 3 round trips + 0.52 ms a block; reading in place 40 round trips (0.8 ms) a step.
    prefix_copy_inputs in;
    in.block_bytes = 16ull * 40 * 2 * 5120 * 2;
    in.layers = 40;
    in.round_trip_s = 20e-6;
    in.copy_bytes_per_s = 25e9;
    in.blocks = 4;  // a short prefix: 2.16 ms of copy
    in.decode_steps = 256;
    const prefix_copy_costs c = prefix_copy_cost(in);
    CHECK(c.copy_s == doctest::Approx(3 * 20e-6 + 4 * in.block_bytes / 25e9));
    CHECK(c.read_in_place_s == doctest::Approx(256 * 40 * 20e-6));
    CHECK(copy_beats_reading_in_place(in));
    in.decode_steps = 2;  // a short answer: two steps of round trips are cheaper than the copy
    CHECK_FALSE(copy_beats_reading_in_place(in));
    in.decode_steps = 256;
    in.blocks = 2000;  // a long prefix (32K tokens): 1 s of copy against 0.2 s of round trips
    CHECK_FALSE(copy_beats_reading_in_place(in));
    in.blocks = 4;
    in.holder_read_anyway = true;  // the request attends that holder anyway: its round trips are paid
    CHECK(prefix_copy_cost(in).read_in_place_s == 0);
    CHECK_FALSE(copy_beats_reading_in_place(in));
    in.holder_read_anyway = false;
    in.round_trip_s = 0;  // never measured: read in place
    CHECK_FALSE(copy_beats_reading_in_place(in));
  }

  TEST_CASE("a measured profile reads sampled rows from its table, a staircase where kernels pad rows") {
    profile p = toy();
    CHECK(sampled_time(p, 3) == doctest::Approx(3 * 0.1e-3));  // no table: a line
    p.sampled_s = {{16, 4e-3}, {17, 8e-3}, {32, 8e-3}, {33, 12e-3}};
    CHECK(sampled_time(p, 0) == 0);
    CHECK(sampled_time(p, 8) == doctest::Approx(2e-3));    // proportional below the first point
    CHECK(sampled_time(p, 24) == doctest::Approx(8e-3));   // flat between 17 and 32: one padded size
    CHECK(sampled_time(p, 34) == doctest::Approx(16e-3));  // the last slope beyond the points
    CHECK(step_time(p, 24, 0, 24) == doctest::Approx(0.5e-3 + 8e-3 + 2 * dense_time(p, 24)));
    auto back = profile_from_json(to_json(p));
    REQUIRE(back.is_ok());
    CHECK(back->sampled_s == p.sampled_s);
    CHECK(profile_from_json(to_json(toy()))->sampled_s.empty());  // optional: older profiles have none
    for (auto bad : {std::vector<std::pair<double, double>>{{17, 1e-3}, {16, 1e-3}},  // descending
                     {{16, 1e-3}, {16, 2e-3}},                                        // a repeated count
                     {{0, 1e-3}}, {{16, -1e-3}}}) {
      profile broken = toy();
      broken.sampled_s = bad;
      auto read = profile_from_json(to_json(broken));
      REQUIRE_FALSE(read.is_ok());
      CHECK(read.error().message().find("sampled_seconds") != std::string::npos);
    }
  }

  TEST_CASE("the profiler counts a step's work and fits back the profile its times came from") {
    // A decode of context 100 and a 10-token chunk at position 5: 11 tokens, KV read 100 + 15, the chunk's
    // causal pairs 10 * 5 + 55, one sampled row.
    const step_work w = work_of({{{1, 99}, {10, 5}}, true});
    CHECK(w.tokens == 11);
    CHECK(w.kv_tokens == 115);
    CHECK(w.prefill_pairs == 105);
    CHECK(w.sampled == 1);
    CHECK(predict(toy(), w) == doctest::Approx(mixed_step_time(toy(), 11, 115, 105, 1)));

    const illm::gpu::model_config shape = illm::gpu::preset_config("stories15m").value();
    profile truth;
    truth.n_layers = shape.n_layers;
    // Padded to 16 rows up to 64, as the cpu kernels do: the fit reads the steps on both sides.
    const auto padded = [](double n) { return n <= 64 ? 16 * std::ceil(n / 16) : n; };
    for (double n : {1, 2, 4, 8, 16, 17, 32, 33, 48, 49, 64, 65, 128, 256, 512})
      truth.dense_s.emplace_back(n, 1e-4 + padded(n) * 3e-6);
    for (double n : {1, 16, 17, 32, 33, 48, 49, 64, 65, 128}) truth.sampled_s.emplace_back(n, padded(n) * 2e-4);
    truth.attention_tokens_per_s = 5e6;
    truth.prefill_pairs_per_s = 2e8;
    std::vector<double> times;
    for (const probe& step : fit_probes()) times.push_back(predict(truth, work_of(step)));
    const auto exactly = [](double v) { return doctest::Approx(v).epsilon(1e-7).scale(0); };  // relative
    auto fitted = fit_profile(times, shape);
    REQUIRE(fitted.is_ok());
    CHECK(fitted->n_layers == truth.n_layers);
    CHECK(fitted->attention_tokens_per_s == exactly(truth.attention_tokens_per_s));
    CHECK(fitted->prefill_pairs_per_s == exactly(truth.prefill_pairs_per_s));
    REQUIRE(fitted->sampled_s.size() == truth.sampled_s.size());
    double per_row = 0;
    for (size_t i = 0; i < truth.sampled_s.size(); ++i) {
      CHECK(fitted->sampled_s[i].first == truth.sampled_s[i].first);
      CHECK(fitted->sampled_s[i].second == exactly(truth.sampled_s[i].second));
      per_row += truth.sampled_s[i].second / truth.sampled_s[i].first / double(truth.sampled_s.size());
    }
    CHECK(fitted->sampled_row_s == exactly(per_row));
    REQUIRE(fitted->dense_s.size() == truth.dense_s.size());
    for (size_t i = 0; i < truth.dense_s.size(); ++i) {
      CHECK(fitted->dense_s[i].first == truth.dense_s[i].first);
      CHECK(fitted->dense_s[i].second == exactly(truth.dense_s[i].second));
    }
    // Times that do not grow with the context fit nothing.
    std::vector<double> flat(times.size(), 1e-3);
    CHECK_FALSE(fit_profile(flat, shape).is_ok());
  }

  TEST_CASE("roofline profiles follow the datasheets") {
    auto a100 = roofline_profile("a100-80g", "llama2-13b");
    REQUIRE(a100.is_ok());
    CHECK(a100->gpus == 1);
    CHECK(a100->n_layers == 40);
    CHECK(a100->kv_bytes_per_token == 2u * 40 * 5120 * 2);
    // Decode is bound by reading the weights; big batches by the math.
    CHECK(dense_time(a100.value(), 1) == doctest::Approx(dense_time(a100.value(), 8)).epsilon(0.01));
    CHECK(dense_time(a100.value(), 4096) > 4 * dense_time(a100.value(), 1));
    CHECK(a100->kv_capacity_tokens > 40000);
    CHECK(a100->kv_capacity_tokens < 80000);
    auto h200 = roofline_profile("h200", "llama2-13b");
    REQUIRE(h200.is_ok());
    CHECK(h200->attention_tokens_per_s > a100->attention_tokens_per_s);
    CHECK(roofline_profile("a100-80g", "llama2-70b")->gpus == 4);  // 140 GB of weights
    auto tp = tensor_parallel_profile("a100-80g", "llama2-13b", 32);
    REQUIRE(tp.is_ok());
    // llama2-13b's 40 heads over 32 GPUs: the busiest GPU takes 2 heads, so attention and KV scale 20-fold
    // (one copy of the weights leaves each GPU more room for KV than a whole replica leaves).
    CHECK(tp->attention_tokens_per_s == doctest::Approx(20 * a100->attention_tokens_per_s));
    CHECK(tp->kv_capacity_tokens > 20 * a100->kv_capacity_tokens);
    CHECK(tp->kv_capacity_tokens < 32 * a100->kv_capacity_tokens);
    auto small = roofline_profile("a100-80g", "llama2-7b");  // 32 heads: an even split
    auto small_tp = tensor_parallel_profile("a100-80g", "llama2-7b", 32);
    CHECK(small_tp->attention_tokens_per_s == doctest::Approx(32 * small->attention_tokens_per_s));
    CHECK(small_tp->prefill_pairs_per_s == doctest::Approx(32 * small->prefill_pairs_per_s));
    // llama2-70b has 8 key/value heads: beyond 8 GPUs each is copied, and attention reads scale no further.
    auto big_8 = tensor_parallel_profile("a100-80g", "llama2-70b", 8);
    auto big_32 = tensor_parallel_profile("a100-80g", "llama2-70b", 32);
    CHECK(big_32->attention_tokens_per_s == doctest::Approx(big_8->attention_tokens_per_s));
    CHECK(big_32->prefill_pairs_per_s == doctest::Approx(4 * big_8->prefill_pairs_per_s));
    CHECK(big_32->kv_capacity_tokens < 2 * big_8->kv_capacity_tokens);
    // Over 4 nodes the all-reduce rings run through all 8 NICs of a node (200 GB/s for HDR): at 8192 tokens
    // a layer's two all-reduces take about 1.8 ms beside 1.1 ms of math (through one NIC, 14 ms).
    CHECK(dense_time(tp.value(), 8192) > 0.002);
    CHECK(dense_time(tp.value(), 8192) < 0.004);
    CHECK_FALSE(roofline_profile("tpu-v9", "llama2-7b").is_ok());
  }

  TEST_CASE("a mixture of experts' step reads the experts its tokens chose, not all of them") {
    const illm::gpu::model_config qwen = illm::gpu::preset_config("qwen3-30b-a3b").value();
    CHECK(experts_touched(qwen, 1) == doctest::Approx(8));
    CHECK(experts_touched(qwen, 16) / 128 == doctest::Approx(0.64).epsilon(0.01));
    CHECK(experts_touched(qwen, 64) / 128 == doctest::Approx(0.98).epsilon(0.01));
    CHECK(experts_touched(illm::gpu::preset_config("llama2-7b").value(), 64) == 0);
    auto moe = roofline_profile("h100", "qwen3-30b-a3b");
    REQUIRE(moe.is_ok());
    // Decode reads 8 of 128 experts a token: batch 64 reads nearly all of them, about twelve times the experts'
    // bytes (beside the launches and all-reduces, which do not grow); a dense model's step reads the same at both.
    CHECK(dense_time(moe.value(), 64) > 3 * dense_time(moe.value(), 1));
    auto dense = roofline_profile("h100", "llama2-13b");
    CHECK(dense_time(dense.value(), 64) < 1.2 * dense_time(dense.value(), 1));
  }

  TEST_CASE("the dense knee: the smallest power-of-two batch within a tolerance of the cheapest token") {
    profile p = toy();
    p.dense_s = {{1, 1e-3}, {3, 2e-3}, {64, 32.5e-3}};  // 0.5 ms a token from 1 on, and 0.5 ms fixed
    // Per token: 1 ms at 1, 0.75 at 2, 0.625 at 4, 0.5625 at 8, 0.531 at 16, 0.516 at 32, 0.508 at 64.
    CHECK(cheapest_dense_per_token(p, 64) == doctest::Approx(32.5e-3 / 64));
    CHECK(cheapest_dense_per_token(p, 16) == doctest::Approx(dense_time(p, 16) / 16));
    CHECK(dense_knee_tokens(p, 64) == 16);        // within 10% of 0.508 ms: 0.559 at most
    CHECK(dense_knee_tokens(p, 64, 0.02) == 32);  // within 2%: 0.518 at most
    CHECK(dense_knee_tokens(p, 4) == 4);          // never past the largest batch allowed
    // a100-80g with llama2-13b: the weights' reads match the math at 115 tokens, so 128 is the knee.
    auto a100 = roofline_profile("a100-80g", "llama2-13b");
    REQUIRE(a100.is_ok());
    CHECK(dense_knee_tokens(a100.value(), 2048) == 128);
  }

  TEST_CASE("Fig 5: the saturated instance lends its long request to the emptiest instances") {
    const profile m = roofline_profile("a100-80g", "llama2-13b").value();
    const uint32_t total = 4200;
    const std::vector<instance_snapshot> cluster = {
        instance(0, total, 4000, 1, 20, 20 * 80, {{4000, 4000}}),       // A: one long request, a queue
        instance(1, total, 800, 10, 0, 0, std::vector<std::pair<uint32_t, uint32_t>>(10, {80, 80})),  // B
        instance(2, total, 960, 12, 0, 0, std::vector<std::pair<uint32_t, uint32_t>>(12, {80, 80})),  // C
        instance(3, total, 2580, 2, 0, 0, {{2500, 2500}, {80, 80}}),  // D: a long request and room
    };
    greedy_options o;
    o.beta_threshold = 8;
    const auto orders = greedy_pass(cluster, m, o);
    REQUIRE_FALSE(orders.empty());
    uint32_t moved = 0;
    for (const auto& s : orders) {
      CHECK(s.order.src == 0);  // only the saturated instance lends
      CHECK(s.order.req == 1);  // its long request
      CHECK((s.order.dst == 1 || s.order.dst == 2));
      CHECK(s.gain_tps > 0);
      moved += s.order.num_blocks;
    }
    CHECK(orders.front().order.dst == 1);  // the least used creditor first
    CHECK(moved <= 3999);
    CHECK(moved >= 80);  // enough for A to admit queued requests
  }

  TEST_CASE("the greedy pass re-sorts creditors and stops when nothing is gained") {
    const profile m = roofline_profile("a100-80g", "llama2-13b").value();
    // Without a queue, freeing the debtor's memory gains nothing: no order at all.
    CHECK(greedy_pass({instance(0, 4200, 4000, 1, 0, 0, {{4000, 4000}}), instance(1, 4200, 100, 4, 0, 0, {})}, m, {})
              .empty());
    // Two creditors almost equally empty: after the first move, the other one is the emptier.
    const auto orders = greedy_pass({instance(0, 4200, 4100, 1, 60, 60 * 60, {{4100, 4100}}),
                                     instance(1, 4200, 100, 2, 0, 0, {}), instance(2, 4200, 140, 2, 0, 0, {})},
                                    m, {});
    REQUIRE(orders.size() >= 2);
    CHECK(orders[0].order.dst == 1);
    CHECK(orders[1].order.dst == 2);
    // Debtors go by batch size: the smaller batch lends first.
    const auto two = greedy_pass({instance(0, 4200, 4100, 6, 60, 3600, {{4000, 4000}}),
                                  instance(1, 4200, 4100, 2, 60, 3600, {{4000, 4000}}),
                                  instance(2, 4200, 100, 2, 0, 0, {}), instance(3, 4200, 100, 2, 0, 0, {})},
                                 m, {});
    // A busy creditor loses more than the debtor gains: no order.
    CHECK(greedy_pass({instance(0, 4200, 4100, 1, 60, 3600, {{4100, 4100}}), instance(1, 4200, 100, 60, 0, 0, {})}, m,
                      {})
              .empty());
    REQUIRE_FALSE(two.empty());
    CHECK(two.front().order.src == 1);
  }
}
