// The cluster simulator: the real actors on simulated time, policies side by side.

#include <doctest/doctest.h>

#include <algorithm>

#include "actors/sim/sim_worker.hpp"
#include "actors/sim/simulation.hpp"
#include "gpu/model_config.hpp"
#include "gpu/batcher.hpp"

using namespace illm;
using namespace illm::actors;

namespace {

sim::sim_report simulate(const std::vector<frontend::trace_row>& trace, sim::sim_options o, const std::string& policy) {
  o.policy = policy;
  auto r = sim::simulate(trace, o);
  REQUIRE_MESSAGE(r.is_ok(), r.error().message());
  return r.value();
}

/// 4 a100-80g with llama2-13b hold about 54K tokens each: one request of 120K tokens among short ones.
std::vector<frontend::trace_row> long_among_short() {
  return {{0, 2000, 50}, {1, 120000, 20}, {2, 3000, 40}, {3, 500, 30}};
}

/// A prefill chunk of 2048 tokens at 200K: its first 10K tokens and its own here (pool 0), the rest spread
/// over holders 1-4.
struct long_prefill {
  gpu::block_table table;
  gpu::step_plan plan;
  long_prefill() {
    const int32_t pos0 = 200000, n = 2048;
    for (uint32_t b = 0; b < gpu::blocks_for_tokens(pos0 + n); ++b)
      table.push_back({b * gpu::kv_block_tokens < 10000 || b * gpu::kv_block_tokens >= pos0 ? 0u : 1 + b % 4, b});
    plan.entries.push_back({1, nullptr, n, pos0, &table, true});
    plan.params.resize(1);
  }
};

}  // namespace

TEST_SUITE("actors") {
  TEST_CASE("a long prefill with remote blocks is timed as two lanes: its dense layers beside its holders' attention") {
    const auto model = placement::roofline_profile("a100-80g", "llama2-13b").value();
    const long_prefill chunk;
    const sim::step_layout one_lane{0, 0.25}, two_lanes{512, 0.25};
    const sim::step_cost one = sim::predict_step(model, 0, chunk.plan, one_lane);
    const sim::step_cost two = sim::predict_step(model, 0, chunk.plan, two_lanes);
    // Each holder attends the same (query, key) pairs either way.
    REQUIRE(one.hosted_s.size() == 4);
    CHECK(two.hosted_s == one.hosted_s);
    double slowest_holder = 0;
    for (const auto& [holder, seconds] : one.hosted_s) slowest_holder = std::max(slowest_holder, seconds);
    // The owner's own attention: the 10K keys here, and the chunk's causal pairs among its own tokens.
    const double local = placement::attention_time(model, 0, 2048.0 * 10000 + 2048.0 * 2049 / 2);
    const double outside = model.step_overhead_s + placement::sampled_time(model, 1);
    const double dense = model.n_layers * placement::dense_time(model, 2048);
    // One lane: each layer's dense, then the slower of the local and the remote attention.
    CHECK(one.seconds == doctest::Approx(outside + dense + std::max(local, slowest_holder)));
    // Two lanes: faster, but no faster than the owner's work or the busiest holder's alone.
    const double owner_work = 2 * model.n_layers * placement::dense_time(model, 1024) + local;
    CHECK(two.seconds < one.seconds * 0.9);
    CHECK(two.seconds >= outside + std::max(owner_work, slowest_holder));
    // Below the engine's threshold, or with every block here, a step runs as one lane.
    CHECK(sim::predict_step(model, 0, chunk.plan, {4096, 0.25}).seconds == doctest::Approx(one.seconds));
    gpu::block_table local_only = chunk.table;
    for (auto& ref : local_only) ref.pool = 0;
    gpu::step_plan here = chunk.plan;
    here.entries[0].table = &local_only;
    CHECK(sim::predict_step(model, 0, here, two_lanes).seconds ==
          doctest::Approx(sim::predict_step(model, 0, here, one_lane).seconds));
  }

  TEST_CASE("a holder busy with its own step attends first, beside it at half speed, or after it") {
    const auto model = placement::roofline_profile("a100-80g", "llama2-13b").value();
    const long_prefill chunk;
    sim::step_layout layout{0, 0.25};  // one lane
    const sim::step_cost idle = sim::predict_step(model, 0, chunk.plan, layout);
    const std::map<instance_id, double> busy{{1, 10.0}};  // holder 1 has 10 s of its own work queued
    const double holder_1 = idle.hosted_s.at(1);
    // First (the default): its own work waits, the owner does not.
    CHECK(sim::predict_step(model, 0, chunk.plan, layout, busy).seconds == doctest::Approx(idle.seconds));
    // After it: the owner's first layer waits the 10 s, then holder 1 attends as before.
    layout.hosted = sim::hosted_timing::queued;
    const double queued = sim::predict_step(model, 0, chunk.plan, layout, busy).seconds;
    CHECK(queued >= 10.0 + holder_1);
    CHECK(queued <= idle.seconds + 10.0 + 1e-9);
    // Beside it at half speed: slower than first, by at most holder 1's work again.
    layout.hosted = sim::hosted_timing::shared;
    const double shared = sim::predict_step(model, 0, chunk.plan, layout, busy).seconds;
    CHECK(shared > idle.seconds * 1.01);
    CHECK(shared <= idle.seconds + holder_1 + 1e-9);
    // With every holder idle the three agree.
    for (const auto timing : {sim::hosted_timing::shared, sim::hosted_timing::queued}) {
      layout.hosted = timing;
      CHECK(sim::predict_step(model, 0, chunk.plan, layout, {{1, 0.0}, {2, 0.0}}).seconds ==
            doctest::Approx(idle.seconds));
    }
  }

  TEST_CASE("a holder attends one job at a time: queued jobs take gaps, an urgent one goes first") {
    sim::hosted_calendar c;
    using kind = sim::hosted_calendar::kind;
    CHECK(c.book(1, 0.0, 2.0) == doctest::Approx(2.0));   // [0, 2)
    CHECK(c.book(1, 1.0, 1.0) == doctest::Approx(3.0));   // after it: [2, 3)
    CHECK(c.book(1, 5.0, 1.0) == doctest::Approx(6.0));   // [5, 6)
    CHECK(c.book(1, 0.0, 1.5) == doctest::Approx(4.5));   // the gap [3, 5) holds it
    CHECK(c.book(1, 0.0, 1.0) == doctest::Approx(7.0));   // no gap left before 6
    CHECK(c.book(2, 0.0, 1.0) == doctest::Approx(1.0));   // another GPU is free
    CHECK(c.book(1, 8.0, 0.0) == doctest::Approx(8.0));   // nothing to do
    // An urgent job begins when it comes, inside a queued one, which runs that much longer; the queued jobs
    // after it move as far as they must.
    sim::hosted_calendar u;
    u.book(1, 0.0, 2.0);                                           // [0, 2)
    u.book(1, 2.0, 1.0);                                           // [2, 3)
    u.book(1, 10.0, 1.0);                                          // [10, 11)
    CHECK(u.book(1, 1.0, 0.5, kind::urgent) == doctest::Approx(1.5));
    CHECK(u.book(1, 1.2, 0.5, kind::urgent) == doctest::Approx(2.0));  // after the urgent one before it
    CHECK(u.book(1, 3.5, 0.5) == doctest::Approx(4.5));             // [0, 2), [2, 3) ran to 3 and 4
    CHECK(u.book(1, 0.0, 6.0) == doctest::Approx(17.0));            // no gap of 6 before 11
    // A queued job steps over the urgent jobs in its way.
    sim::hosted_calendar v;
    v.book(1, 1.0, 1.0, kind::urgent);
    CHECK(v.book(1, 0.0, 2.0) == doctest::Approx(3.0));  // [0, 3) with the urgent second inside
    CHECK(v.size() == 2);
    v.forget_before(2.5);  // the urgent job ended, the queued one did not
    CHECK(v.size() == 1);
    v.forget_before(3.0);
    CHECK(v.size() == 0);
  }

  TEST_CASE("a GPU's own layers run in pieces in the time its hosted jobs leave free; later hosted jobs push them") {
    sim::hosted_calendar c;
    using kind = sim::hosted_calendar::kind;
    c.book(1, 0.0, 1.0);                                            // hosted: [0, 1)
    c.book(1, 2.0, 1.0);                                            // hosted: [2, 3)
    CHECK(c.book(1, 0.5, 2.0, kind::own) == doctest::Approx(4.0));  // [1, 2) and [3, 4)
    CHECK(c.take_pushed(1) == 0.0);
    // A hosted job booked after them runs at once, and the GPU's own work ends that much later.
    CHECK(c.book(1, 0.0, 0.5) == doctest::Approx(1.5));  // [1, 1.5), over its own piece
    CHECK(c.take_pushed(1) == doctest::Approx(0.5));
    CHECK(c.take_pushed(1) == 0.0);                                 // taken
    CHECK(c.book(1, 3.0, 0.5) == doctest::Approx(3.5));             // [3, 3.5), over its own piece
    CHECK(c.book(1, 4.5, 1.0) == doctest::Approx(5.5));             // after its own work
    CHECK(c.take_pushed(1) == doctest::Approx(0.5));
    // Own pieces step over everything booked: [4, 4.5) and [5.5, 6).
    CHECK(c.book(1, 0.0, 1.0, kind::own) == doctest::Approx(6.0));
    CHECK(c.book(2, 0.0, 1.0, kind::own) == doctest::Approx(1.0));  // another GPU
    CHECK(c.take_pushed(3) == 0.0);                                 // none booked
    // An urgent job over the GPU's own work pushes it too.
    sim::hosted_calendar u;
    u.book(1, 0.0, 2.0, kind::own);
    CHECK(u.book(1, 1.0, 0.5, kind::urgent) == doctest::Approx(1.5));
    CHECK(u.take_pushed(1) == doctest::Approx(0.5));
    u.forget_before(10.0);
    CHECK(u.size() == 0);
  }

  TEST_CASE("interleaved: a step's own layers take turns with the attention its GPU hosts for others") {
    const auto model = placement::roofline_profile("a100-80g", "llama2-13b").value();
    const long_prefill chunk;
    sim::step_layout layout{0, 0.25};  // one lane
    const sim::step_cost alone = sim::predict_step(model, 0, chunk.plan, layout);
    layout.hosted = sim::hosted_timing::interleaved;
    {  // an idle GPU: as if its layers ran at once
      sim::hosted_calendar calendar;
      CHECK(sim::predict_step(model, 0, chunk.plan, layout, {}, {}, &calendar, 0.0).seconds ==
            doctest::Approx(alone.seconds));
    }
    // 10 s of attention hosted for others already booked on GPU 0: its first layer waits for it.
    sim::hosted_calendar busy;
    busy.book(0, 0.0, 10.0);
    const double after = sim::predict_step(model, 0, chunk.plan, layout, {}, {}, &busy, 0.0).seconds;
    CHECK(after >= 10.0);
    CHECK(after <= 10.0 + alone.seconds + 1e-9);
    // A hosted job booked once the step is under way goes first, and the step ends later by the time it
    // takes over the step's own layers; what falls while the step waits for its holders does not count.
    sim::hosted_calendar later;
    const sim::step_cost booked = sim::predict_step(model, 0, chunk.plan, layout, {}, {}, &later, 0.0);
    const double first_front = booked.stored_s[0][0];  // layer 0's dense part before its attention
    CHECK(later.book(0, 0.0, first_front) == doctest::Approx(first_front));
    CHECK(later.take_pushed(0) == doctest::Approx(first_front));
    double hosted = 0;  // small jobs all over the step: some over its own layers, some in its waits
    for (double t = 0; t < booked.seconds; t += booked.seconds / 100) {
      later.book(0, t, 1e-4);
      hosted += 1e-4;
    }
    const double pushed = later.take_pushed(0);
    CHECK(pushed > 0);
    CHECK(pushed < hosted * 0.9);
    later.book(0, booked.seconds + 1.0, 1.0);  // after the step
    CHECK(later.take_pushed(0) == 0.0);
  }

  TEST_CASE("two owners attending one holder at once take turns; a decode token's attention goes first") {
    const auto model = placement::roofline_profile("a100-80g", "llama2-13b").value();
    const long_prefill chunk;
    const sim::step_layout layout{0, 0.25};  // one lane
    sim::hosted_calendar calendar;
    const double alone = sim::predict_step(model, 0, chunk.plan, layout, {}, {}, &calendar, 0.0).seconds;
    CHECK(alone == doctest::Approx(sim::predict_step(model, 0, chunk.plan, layout).seconds));
    // The same queries from another owner at the same time, to the same holders: they wait their turn.
    const double second = sim::predict_step(model, 5, chunk.plan, layout, {}, {}, &calendar, 0.0).seconds;
    CHECK(second > alone * 1.2);
    // A decode token over blocks on holder 1, booked after both, halfway through the first: it does not wait
    // for them; in arrival order it would.
    gpu::block_table decode_table;
    for (uint32_t b = 0; b < 100; ++b) decode_table.push_back({b < 90 ? 1u : 6u, b});
    gpu::step_plan decode;
    decode.entries.push_back({2, nullptr, 1, 1599, &decode_table, true});
    decode.params.resize(1);
    const double free_decode = sim::predict_step(model, 6, decode, layout).seconds;
    sim::hosted_calendar before = calendar;
    CHECK(sim::predict_step(model, 6, decode, layout, {}, {}, &calendar, alone / 2).seconds ==
          doctest::Approx(free_decode));
    sim::step_layout in_order = layout;
    in_order.decode_first = false;
    CHECK(sim::predict_step(model, 6, decode, in_order, {}, {}, &before, alone / 2).seconds > 2 * free_decode);
  }

  TEST_CASE("a chunk's queries reach a holder no earlier than the chunk before them there writes the layer") {
    const auto model = placement::roofline_profile("a100-80g", "llama2-13b").value();
    const long_prefill chunk;
    const sim::step_layout layout{0, 0.25};  // one lane
    const sim::step_cost free = sim::predict_step(model, 0, chunk.plan, layout);
    REQUIRE(free.stored_s.size() == 1);
    REQUIRE(free.stored_s[0].size() == size_t(model.n_layers));
    for (size_t l = 1; l < free.stored_s[0].size(); ++l) CHECK(free.stored_s[0][l] > free.stored_s[0][l - 1]);
    CHECK(free.stored_s[0].back() < free.seconds);
    // Holder 2 writes layer l of the chunk before this one at 10 s + 0.1 s per layer.
    std::vector<double> written;
    for (int l = 0; l < model.n_layers; ++l) written.push_back(10.0 + 0.1 * l);
    const sim::layer_gates gates{{{2, written}}};
    const sim::step_cost gated = sim::predict_step(model, 0, chunk.plan, layout, {}, gates);
    CHECK(gated.seconds >= written.back() + free.hosted_s.at(2) / model.n_layers);
    CHECK(gated.seconds <= written.back() + free.seconds);
    CHECK(gated.hosted_s == free.hosted_s);  // the same work, later
    // Gates past already: no wait.
    const sim::layer_gates past{{{2, std::vector<double>(size_t(model.n_layers), -1.0)}}};
    CHECK(sim::predict_step(model, 0, chunk.plan, layout, {}, past).seconds == doctest::Approx(free.seconds));
  }

  TEST_CASE("a step's queries and partials cross NVLink to holders on its node and the NIC to others") {
    const auto model = placement::roofline_profile("a100-80g", "llama2-13b").value();
    const auto shape = gpu::preset_config("llama2-13b").value();
    const long_prefill near;  // holders 1-4: on the owner's node of 8
    sim::step_layout layout{0, 0.25};  // one lane
    layout.row_bytes = sim::attention_row_bytes::of(shape);
    const double untimed = sim::predict_step(model, 0, near.plan, layout).seconds;
    layout.links = {model.node_link_bytes_per_s, model.network_bytes_per_s, 8, 1};
    layout.relay_min_rows = 0;  // each holder's queries over the owner's link
    const double over_nvlink = sim::predict_step(model, 0, near.plan, layout).seconds;
    // The same holders on another node (ids 9-12).
    long_prefill far;
    for (auto& ref : far.table)
      if (ref.pool != 0) ref.pool += 8;
    const double over_nic = sim::predict_step(model, 0, far.plan, layout).seconds;
    // Per layer, the queries to the four holders leave one after another, and their partials come back so.
    const double rows = 2048, queries = rows * layout.row_bytes.query, partials = rows * layout.row_bytes.partial;
    CHECK(over_nvlink > untimed);
    CHECK(over_nic > over_nvlink);
    CHECK(over_nic >= untimed + model.n_layers * 4 * (queries + partials) / model.network_bytes_per_s * 0.5);
    CHECK(over_nic <= untimed + model.n_layers * 4 * (queries + partials) / model.network_bytes_per_s + 1e-9);
    // Relayed through the first of them: the queries and one merged partial cross the NIC once a layer.
    layout.relay_min_rows = 64;
    const double relayed = sim::predict_step(model, 0, far.plan, layout).seconds;
    CHECK(relayed < over_nic);
    CHECK(relayed >= untimed + model.n_layers * (queries + partials) / model.network_bytes_per_s);
    layout.relay_min_rows = 4096;  // fewer rows than that: not relayed
    CHECK(sim::predict_step(model, 0, far.plan, layout).seconds == doctest::Approx(over_nic));
    CHECK(layout.links.same_node(0, 7));
    CHECK_FALSE(layout.links.same_node(7, 8));
    const sim::link_model pairs{1e9, 1e8, 8, 4};  // instances of 4 GPUs: two a node
    CHECK(pairs.same_node(0, 1));
    CHECK_FALSE(pairs.same_node(1, 2));
    CHECK(pairs.seconds(1, 2, 4e8) == doctest::Approx(1.0));  // four NICs at once
  }

  TEST_CASE("moved blocks cross the links: a run that moves them takes longer than with free links") {
    const std::vector<frontend::trace_row> one{{0, 200000, 20}};
    sim::sim_options o;
    o.instances = 8;
    o.batch.room_prefill_min_chunks = 0;  // its owner prefills it and moves its blocks into the room
    const auto timed = simulate(one, o, "infinite");
    o.timed_links = false;
    const auto free = simulate(one, o, "infinite");
    REQUIRE(timed.completed == 1);
    REQUIRE(free.completed == 1);
    CHECK(timed.moves > 0);
    CHECK(timed.makespan_s > free.makespan_s);
  }

  TEST_CASE("a long prompt prefilled by its room's holders has its first token sooner, within its work's bound") {
    const std::vector<frontend::trace_row> one{{0, 400000, 20}};
    sim::sim_options o;
    o.instances = 16;
    o.batch.room_prefill_min_chunks = 0;  // its owner prefills it, moving its blocks into the room
    const auto by_owner = simulate(one, o, "infinite");
    o.batch.room_prefill_min_chunks = 2;
    const auto by_room = simulate(one, o, "infinite");
    REQUIRE(by_owner.completed == 1);
    REQUIRE(by_room.completed == 1);
    MESSAGE("400K-token prompt on 16 a100-80g: first token at ", by_owner.ttft_s.p50, " s by its owner, ",
            by_room.ttft_s.p50, " s by its room; work bound ", by_room.work_bound_s, " s");
    CHECK(by_room.ttft_s.p50 < 0.6 * by_owner.ttft_s.p50);
    CHECK(by_room.makespan_s >= by_room.work_bound_s);
    CHECK(by_room.moves > by_owner.moves);  // every chunk is a placement of its own
  }

  TEST_CASE("under light load every policy completes the trace with the same throughput within 5%") {
    auto trace = frontend::read_trace(ILLM_TEST_DATA_DIR "/traces/azure2023_conv.csv");
    REQUIRE(trace.is_ok());
    sim::sim_options o;
    o.instances = 4;
    o.limit = 200;
    o.rate_scale = 0.05;  // 200 requests over ~20 minutes on 4 GPUs: far below capacity
    std::vector<double> throughput;
    for (const auto& policy : sim::policy_names()) {
      const auto r = simulate(trace.value(), o, policy);
      CHECK_MESSAGE(r.completed == 200, policy);
      CHECK(r.output_tokens > 0);
      throughput.push_back(r.throughput_tok_s);
    }
    const auto [lo, hi] = std::minmax_element(throughput.begin(), throughput.end());
    CHECK(*hi <= *lo * 1.05);
  }

  TEST_CASE("a request longer than one instance completes with lending and is refused by static-multi") {
    const auto trace = long_among_short();
    sim::sim_options o;
    o.instances = 4;
    const auto infinite = simulate(trace, o, "infinite");
    CHECK(infinite.completed == 4);
    CHECK(infinite.moves > 0);
    const auto passive = simulate(trace, o, "passive");
    CHECK(passive.completed == 4);
    const auto multi = simulate(trace, o, "static-multi");
    CHECK(multi.completed == 3);
    CHECK(multi.refused == 1);
    const auto single = simulate(trace, o, "static-single");
    CHECK(single.completed == 4);
  }

  TEST_CASE("the report gives the GPUs' time and the KV memory used and promised over the run") {
    // One request alone on one instance: its KV never takes more than its 1,000 + 2,000 tokens' blocks,
    // and the blocks for the answer it has not written yet are promised to it from its start.
    sim::sim_options o;
    o.instances = 1;
    const auto alone = simulate({{0, 1000, 2000}}, o, "static-multi");
    REQUIRE(alone.completed == 1);
    const double its_blocks = double(3000 / 16 + 1) / double(alone.kv_tokens_per_instance / 16);
    CHECK(alone.kv_used_fraction > 0);
    CHECK(alone.kv_used_fraction <= its_blocks);
    CHECK(alone.kv_promised_fraction > 0);
    CHECK(alone.busy_fraction > 0);
    CHECK(alone.busy_fraction <= 1.0 + 1e-9);
    CHECK(alone.hosted_fraction == 0);
    // A request longer than one instance: its holders attend for it, with lending only.
    const auto trace = long_among_short();
    o.instances = 4;
    const auto infinite = simulate(trace, o, "infinite");
    const auto multi = simulate(trace, o, "static-multi");
    CHECK(infinite.hosted_fraction > 0);
    CHECK(multi.hosted_fraction == 0);
    for (const auto* r : {&infinite, &multi}) {
      CHECK(r->kv_used_fraction > 0);
      CHECK(r->kv_used_fraction + r->kv_promised_fraction <= 1.0 + 1e-9);
    }
  }

  TEST_CASE("the timeline cuts the run into periods that add up to the report's figures") {
    sim::sim_options o;
    o.instances = 4;
    o.timeline_period_s = 2;
    const auto r = simulate(long_among_short(), o, "infinite");
    REQUIRE(r.completed == 4);
    REQUIRE(r.timeline.size() >= 2);
    double busy_s = 0, hosted_s = 0, before = 0;
    size_t finished = 0;
    bool hosted = false;
    for (const auto& t : r.timeline) {
      CHECK(t.end_s > before);
      CHECK(t.finished >= finished);
      CHECK(t.started >= t.finished);
      CHECK(t.stepping <= o.instances);
      CHECK(t.kv_used_fraction + t.kv_promised_fraction <= 1.0 + 1e-9);
      busy_s += t.busy_fraction * (t.end_s - before);
      hosted_s += t.hosted_fraction * (t.end_s - before);
      hosted = hosted || t.hosted_fraction > 0;
      before = t.end_s;
      finished = t.finished;
    }
    CHECK(r.timeline.front().end_s >= o.timeline_period_s);
    CHECK(r.timeline.back().finished == 4);
    CHECK(r.timeline.back().end_s == doctest::Approx(r.makespan_s).epsilon(1e-6));
    CHECK(busy_s == doctest::Approx(r.busy_fraction * r.makespan_s).epsilon(1e-6));
    CHECK(hosted_s == doctest::Approx(r.hosted_fraction * r.makespan_s).epsilon(1e-6));
    CHECK(hosted);  // the long request's holders attend for it
    o.timeline_period_s = 0;
    CHECK(simulate(long_among_short(), o, "infinite").timeline.empty());
  }

  TEST_CASE("the work bound is below every policy's makespan and close to a lone one-step request's") {
    sim::sim_options o;
    o.instances = 1;
    // One step: a 2048-token prompt at the full batch, sampling its one answer token.
    const auto one_step = simulate({{0, 2048, 1}}, o, "static-multi");
    REQUIRE(one_step.completed == 1);
    CHECK(one_step.work_bound_s <= one_step.makespan_s);
    CHECK(one_step.work_bound_s >= 0.95 * one_step.makespan_s);  // the step's overhead and sampling aside
    o.instances = 4;
    for (const char* policy : {"infinite", "passive", "static-multi", "static-single"}) {
      const auto r = simulate(long_among_short(), o, policy);
      CAPTURE(policy);
      CHECK(r.work_bound_s > 0);
      CHECK(r.work_bound_s <= r.makespan_s);
    }
    // Twice the instances halve it.
    const auto four = simulate({{0, 2048, 1}, {0, 2048, 1}}, o, "static-multi");
    o.instances = 8;
    CHECK(simulate({{0, 2048, 1}, {0, 2048, 1}}, o, "static-multi").work_bound_s ==
          doctest::Approx(four.work_bound_s / 2));
  }

  TEST_CASE("rooms granted one after another never wait for each other's blocks") {
    // claudecode_sessions_t0.csv on 8 instances, hosted attention after the holders' own steps. The first 40
    // with infinite: a room granted to the first request (71K tokens, keeping 1803 blocks here) once saw
    // those blocks promised to younger rooms and held for a waiting one whose owners waited in turn (12 never
    // ended). The first 80 with passive: a room granted over blocks promised to another room since its ask
    // kept them from that room's moves while waiting for them (29 never ended). Requests longer than the
    // cluster (798K tokens) are refused; every other one ends.
    auto trace = frontend::read_trace(std::string(ILLM_TEST_DATA_DIR) + "/traces/claudecode_sessions_t0.csv");
    REQUIRE(trace.is_ok());
    sim::sim_options o;
    o.instances = 8;
    o.hosted = sim::hosted_timing::queued;
    for (const auto& [policy, n] : {std::pair{"infinite", size_t(40)}, std::pair{"passive", size_t(80)}}) {
      CAPTURE(policy);
      o.limit = n;
      const auto r = simulate(trace.value(), o, policy);
      CHECK(r.completed + r.refused == n);
      CHECK(r.failed == 0);
    }
  }

  TEST_CASE("pools scaled up hold a request that one instance's memory could not") {
    sim::sim_options o;
    o.instances = 4;
    o.kv_scale = 3;  // about 162K tokens each: the 120K request fits one instance
    const auto multi = simulate(long_among_short(), o, "static-multi");
    CHECK(multi.completed == 4);
    CHECK(multi.refused == 0);
    CHECK(multi.kv_tokens_per_instance > 120000);
    o.kv_scale = 0;
    CHECK_FALSE(sim::check_options(o).is_ok());
    o.kv_scale = 1;
    o.timeline_period_s = -1;
    CHECK_FALSE(sim::check_options(o).is_ok());
  }

  TEST_CASE("a request that finds its idle instance's pool full of another's KV starts with a room") {
    // 3 a100-80g with llama2-13b hold 53,664 tokens each. Round robin: an 80K-token request on instance 0
    // with a long answer keeps most of its KV in a room on instances 1 and 2; a tiny one goes to 1. A 30K
    // request comes to instance 2 a minute later: what instance 2 has free cannot hold it, and nothing runs
    // there whose end would free more, so it borrows the rest rather than wait for the long answer.
    std::vector<frontend::trace_row> trace{{0, 80000, 3000}, {0, 100, 10}, {60, 30000, 10}};
    sim::sim_options o;
    o.instances = 3;
    o.router = sim::routing::round_robin;
    o.rate_scale = 1;  // arrivals at their times
    const auto r = simulate(trace, o, "infinite");
    REQUIRE(r.completed == trace.size());
    CHECK(r.finished_s[2] < r.finished_s[0]);
  }

  TEST_CASE("an instance over several GPUs holds more KV; fewer GPUs than the weights need is an error") {
    // A 120K-token request: more than one a100-80g holds with llama2-13b (about 54K tokens), less than four
    // (their weights stored once: about 310K).
    std::vector<frontend::trace_row> trace{{0, 120000, 20}, {0, 2000, 20}};
    sim::sim_options o;
    o.instances = 2;
    const auto one = simulate(trace, o, "static-multi");
    CHECK(one.refused == 1);
    o.gpus_per_instance = 4;
    const auto four = simulate(trace, o, "static-multi");
    CHECK(four.completed == 2);
    CHECK(four.kv_tokens_per_instance > 4 * one.kv_tokens_per_instance);
    o.model = "llama2-70b";  // 140 GB of weights
    o.gpus_per_instance = 2;
    o.policy = "infinite";
    const auto too_few = sim::simulate(trace, o);
    REQUIRE_FALSE(too_few.is_ok());
    CHECK(too_few.error().message() == "llama2-70b needs at least 4 a100-80g per instance");
  }

  TEST_CASE("a 2000K-token request completes on 32 simulated a100-80g with llama2-7b") {
    std::vector<frontend::trace_row> trace{{0, 2000000, 16}};
    sim::sim_options o;
    o.instances = 32;
    o.model = "llama2-7b";
    const auto r = simulate(trace, o, "infinite");
    CHECK(r.completed == 1);
    CHECK(r.output_tokens == 16);
    CHECK(r.kv_tokens_per_instance < 2000000 / 16);  // it needed the memory of more than 16 instances
  }

  TEST_CASE("a request longer than one instance is not starved by the short requests queued after it") {
    // 4 a100-80g with llama2-13b hold about 54K tokens each. A 120K-token request needs most of the other
    // three instances' blocks at once; the 200 requests of 20K tokens behind it would take them as they
    // free (it ended after all of them, at 758 s, before the gManager held blocks back for it).
    std::vector<frontend::trace_row> trace{{0, 20000, 100}, {0, 120000, 20}};
    for (int i = 0; i < 200; ++i) trace.push_back({0, 20000, 100});
    sim::sim_options o;
    o.instances = 4;
    const auto r = simulate(trace, o, "infinite");
    REQUIRE(r.completed == trace.size());
    std::vector<double> shorts(r.finished_s.begin() + 2, r.finished_s.end());
    std::sort(shorts.begin(), shorts.end());
    CHECK(r.finished_s[1] < shorts[shorts.size() / 2]);  // before half of those queued after it
  }

  TEST_CASE("a short request queued behind a long one waiting for its room starts at once") {
    // 2 a100-80g with llama2-13b hold 53,664 tokens each. Round robin: instance 0 runs a 50K-token request
    // with a long answer (and a tiny one); instance 1 has a 60K-token request, whose room must be on instance
    // 0 and waits for it, then a small request that fits beside it. The small one runs meanwhile.
    // (passive: no loan moves the long answer's blocks to instance 1 while it has room.)
    std::vector<frontend::trace_row> trace{{0, 50000, 3000}, {0, 60000, 10}, {0, 100, 10}, {0, 2000, 10}};
    sim::sim_options o;
    o.instances = 2;
    o.router = sim::routing::round_robin;
    const auto r = simulate(trace, o, "passive");
    REQUIRE(r.completed == trace.size());
    CHECK(r.finished_s[1] > r.finished_s[0]);  // the room came when the 45K-token request ended
    CHECK(r.finished_s[3] < r.finished_s[0]);  // the small request did not wait for it
  }
}
